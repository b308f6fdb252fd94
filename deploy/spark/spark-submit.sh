#!/usr/bin/env bash
# Submit the txbuffer Spark job (Kafka -> Delta Lake) to the cluster manager you name.
#
#   SPARK_MASTER=k8s://https://my-cluster:6443 IMAGE=registry.example/txbuffer-spark:0.1.0 \
#     LAKE=s3a://my-bucket/lake deploy/spark/spark-submit.sh
#   SPARK_MASTER=spark://spark-master:7077 LAKE=hdfs:///lake deploy/spark/spark-submit.sh
#   SPARK_MASTER=yarn LAKE=s3a://my-bucket/lake deploy/spark/spark-submit.sh
#
# Master, deploy mode, executors and memory are this launcher's choice; the job sets none of them.
# On Kubernetes the image from deploy/spark/Dockerfile carries the connector jars and
# deploy/k8s/spark-rbac.yaml must be applied. Elsewhere the jars are resolved from
# deploy/maven/spark/pom.xml into the local txbuffer cache and shipped with --jars.
# Extra arguments are passed to `txbuffer spark`.
set -euo pipefail

: "${SPARK_MASTER:?set SPARK_MASTER to your cluster manager: k8s://https://host:6443, spark://host:7077 or yarn}"
LAKE="${LAKE:?set LAKE to the lake root URI, e.g. s3a://bucket/lake}"
CHECKPOINT="${CHECKPOINT:-${LAKE%/}/_checkpoints/txbuffer}"
BOOTSTRAP="${BOOTSTRAP:-kafka-bootstrap.kafka.svc:9092}"
EXECUTORS="${EXECUTORS:-4}"
EXECUTOR_CORES="${EXECUTOR_CORES:-2}"
TRIGGER_INTERVAL="${TRIGGER_INTERVAL:-30s}"
MAX_OFFSETS="${MAX_OFFSETS:-500000}"

args=(
  --master "${SPARK_MASTER}"
  --name txbuffer-spark
  --conf spark.executor.instances="${EXECUTORS}"
  --conf spark.executor.cores="${EXECUTOR_CORES}"
  --conf spark.executor.memory="${EXECUTOR_MEMORY:-4g}"
  --conf spark.driver.memory="${DRIVER_MEMORY:-2g}"
  --conf spark.sql.shuffle.partitions=$((EXECUTORS * EXECUTOR_CORES * 2))
  --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
  --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog
)

case "${SPARK_MASTER}" in
  k8s://*)
    NAMESPACE="${NAMESPACE:-txbuffer}"
    IMAGE="${IMAGE:?set IMAGE to the image built from deploy/spark/Dockerfile}"
    args+=(
      --deploy-mode cluster
      --conf spark.kubernetes.namespace="${NAMESPACE}"
      --conf spark.kubernetes.container.image="${IMAGE}"
      --conf spark.kubernetes.authenticate.driver.serviceAccountName=txbuffer-spark
      --conf spark.kubernetes.driverEnv.TXBUFFER_BOOTSTRAP="${BOOTSTRAP}"
      --conf spark.kubernetes.driverEnv.TXBUFFER_SPARK_JARS=none
      --conf spark.executorEnv.TXBUFFER_BOOTSTRAP="${BOOTSTRAP}"
    )
    MAIN=local:///opt/txbuffer/spark_main.py
    ;;
  *)
    # Standalone and YARN run Python drivers in client mode: the driver is this machine.
    JARS="${JARS:-$(python -c 'from processor.spark.session import connector_jars; print(",".join(connector_jars()))')}"
    [ -n "${JARS}" ] || { echo "no connector jars: install Maven and a JDK, or set JARS" >&2; exit 1; }
    args+=(--deploy-mode client --jars "${JARS}" --conf spark.executorEnv.TXBUFFER_BOOTSTRAP="${BOOTSTRAP}")
    export TXBUFFER_SPARK_JARS=none  # spark-submit ships them; the job must not add them twice
    MAIN="$(cd "$(dirname "$0")" && pwd)/spark_main.py"
    ;;
esac

export TXBUFFER_BOOTSTRAP="${BOOTSTRAP}"
exec spark-submit "${args[@]}" "${MAIN}" \
  spark --bootstrap "${BOOTSTRAP}" --trigger continuous-interval --interval "${TRIGGER_INTERVAL}" \
  --max-offsets-per-trigger "${MAX_OFFSETS}" --checkpoint "${CHECKPOINT}" --output "${LAKE}" "$@"
