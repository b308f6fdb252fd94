#!/usr/bin/env bash
# Submit the txbuffer Spark job to Kubernetes in cluster mode.
#
#   K8S_API=https://my-cluster:6443 IMAGE=registry.example/txbuffer-spark:0.1.0 deploy/spark/spark-submit.sh
#
# Needs deploy/k8s/spark-rbac.yaml applied (service account, role, lake volume claim) and the image
# built from deploy/spark/Dockerfile. Extra arguments are passed to `txbuffer spark`.
set -euo pipefail

: "${K8S_API:?set K8S_API to the API server URL, e.g. https://my-cluster:6443}"
NAMESPACE="${NAMESPACE:-txbuffer}"
IMAGE="${IMAGE:-txbuffer-spark:0.1.0}"
BOOTSTRAP="${BOOTSTRAP:-kafka-bootstrap.kafka.svc:9092}"
EXECUTORS="${EXECUTORS:-4}"
SPARK_KAFKA="${SPARK_KAFKA:-org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1}"
LAKE_CLAIM="${LAKE_CLAIM:-txbuffer-lake}"

exec spark-submit \
  --master "k8s://${K8S_API}" \
  --deploy-mode cluster \
  --name txbuffer-spark \
  --packages "${SPARK_KAFKA}" \
  --conf spark.jars.ivy=/tmp/ivy \
  --conf spark.kubernetes.namespace="${NAMESPACE}" \
  --conf spark.kubernetes.container.image="${IMAGE}" \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=txbuffer-spark \
  --conf spark.kubernetes.driverEnv.TXBUFFER_BOOTSTRAP="${BOOTSTRAP}" \
  --conf spark.executorEnv.TXBUFFER_BOOTSTRAP="${BOOTSTRAP}" \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.lake.options.claimName="${LAKE_CLAIM}" \
  --conf spark.kubernetes.driver.volumes.persistentVolumeClaim.lake.mount.path=/data \
  --conf spark.kubernetes.executor.volumes.persistentVolumeClaim.lake.options.claimName="${LAKE_CLAIM}" \
  --conf spark.kubernetes.executor.volumes.persistentVolumeClaim.lake.mount.path=/data \
  --conf spark.executor.instances="${EXECUTORS}" \
  --conf spark.driver.memory=2g \
  --conf spark.executor.memory=4g \
  --conf spark.executor.cores=2 \
  --conf spark.sql.shuffle.partitions=$((EXECUTORS * 4)) \
  local:///opt/txbuffer/spark_main.py \
  spark --trigger continuous-interval --checkpoint /data/checkpoint --output /data/lake "$@"
