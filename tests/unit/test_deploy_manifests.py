"""Offline validation of the deployment files: docker-compose.yml, deploy/k8s/*.yaml, the Spark manifests.

Schemas come from PyPI packages, so a clean clone validates with no network:
- the Compose specification JSON schema is vendored by check-jsonschema
  (check_jsonschema/builtin_schemas/vendor/compose-spec.json);
- the Kubernetes API schemas (strict: unknown fields rejected) are shipped by kubernetes-validate.
Cross-file checks tie the manifests to the code: TXBUFFER_* names, config values, CLI arguments.
"""

from __future__ import annotations

import copy
import importlib
import importlib.resources
import importlib.util
import json
import os
import re
import shlex
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from processor.cli import app as cli
from processor.runtime.config import ENV_PREFIX, ProcessorConfig, load_config

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate (test extra) ships the Kubernetes schemas"
)
pytest.importorskip("check_jsonschema", reason="check-jsonschema (test extra) ships the Compose schema")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
K8S_DIR = ROOT / "deploy" / "k8s"
SPARK_APP = ROOT / "deploy" / "spark" / "sparkapplication.yaml"
SPARK_SUBMIT = ROOT / "deploy" / "spark" / "spark-submit.sh"
DOCKERFILES = [ROOT / "deploy" / "Dockerfile", ROOT / "deploy" / "spark" / "Dockerfile"]

# Oldest supported cluster (StatefulSet PVC retention policy is on by default from 1.27) and newest.
K8S_VERSIONS = ["1.29.0", kubernetes_validate.utils.latest_version()]

# TXBUFFER_* variables that are not ProcessorConfig fields, with the module that reads each.
NON_CONFIG_ENV = {
    "TXBUFFER_SCHEMAS": ROOT / "processor" / "core" / "events.py",
    "TXBUFFER_SPARK_JARS": ROOT / "processor" / "spark" / "session.py",
}

TXBUFFER_IMAGES = {"txbuffer:0.1.0"}
SPARK_IMAGES = {"txbuffer-spark:0.1.0"}


# --------------------------------------------------------------------------- loading


def compose_schema() -> dict:
    ref = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(ref.read_text(encoding="utf-8"))


def compose_errors(doc: dict) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]


def k8s_errors(doc: dict) -> list[str]:
    problems = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(map(str, exc.absolute_path)) or "<root>"
            problems.append(
                f"k8s {version} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {where}: {exc.message}"
            )
    return problems


def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def k8s_documents() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


def k8s_by_kind(kind: str) -> list[dict]:
    return [doc for _, doc in k8s_documents() if doc["kind"] == kind]


def statefulset() -> dict:
    (sts,) = k8s_by_kind("StatefulSet")
    return sts


def processor_container() -> dict:
    (container,) = [c for c in statefulset()["spec"]["template"]["spec"]["containers"] if c["name"] == "processor"]
    return container


def configmap_config(tmp_path: Path) -> ProcessorConfig:
    (cm,) = [d for d in k8s_by_kind("ConfigMap") if d["metadata"]["name"] == "txbuffer-processor"]
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    return load_config(path, env={})


# --------------------------------------------------------------------------- Compose schema


def test_compose_file_matches_compose_specification():
    assert compose_errors(load_compose()) == []


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda d: d["services"]["processor"]["healthcheck"].__setitem__(
                "intervall", d["services"]["processor"]["healthcheck"].pop("interval")
            ),
            "intervall",
        ),
        (
            lambda d: d["services"]["spark"]["depends_on"]["processor"].__setitem__("condition", "service_healty"),
            "service_healty",
        ),
        (
            lambda d: d["services"]["processor"].__setitem__("volume", d["services"]["processor"].pop("volumes")),
            "volume",
        ),
        (lambda d: d["services"]["kafka"].__setitem__("ports", "29092:29092"), "ports"),
    ],
    ids=["misspelled-healthcheck-key", "bad-depends-on-condition", "misspelled-service-key", "wrong-type"],
)
def test_compose_schema_rejects_an_invalid_copy(mutate, expected):
    doc = copy.deepcopy(load_compose())
    mutate(doc)
    errors = compose_errors(doc)
    assert errors, "the Compose schema accepted an invalid file"
    assert any(expected in e for e in errors), errors


def test_compose_services_start_in_order_and_reference_declared_things():
    doc = load_compose()
    services = doc["services"]
    declared_volumes = set(doc.get("volumes") or {})
    for name, svc in services.items():
        for dep, spec in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], (
                    f"{name} waits for {dep} to be healthy, but it has no healthcheck"
                )
            # A service outside a profile must not wait for one that only starts with that profile.
            if not svc.get("profiles"):
                assert not services[dep].get("profiles"), f"{name} (default profile) depends on profiled {dep}"
        for mount in svc.get("volumes") or []:
            source = mount.split(":", 1)[0] if isinstance(mount, str) else mount.get("source")
            if source and not source.startswith((".", "/")):
                assert source in declared_volumes, f"{name} mounts undeclared volume {source}"
    assert services["kafka"]["image"].startswith("apache/kafka:") and not services["kafka"]["image"].endswith(":latest")
    assert services["processor"]["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"
    assert services["spark"]["depends_on"]["processor"]["condition"] == "service_healthy"
    # The connectors are in the Spark image (resolved from deploy/maven/spark/pom.xml at build time), not
    # fetched with --packages at run time; the service runs the job on the image it builds.
    assert "PYSPARK_SUBMIT_ARGS" not in (services["spark"].get("environment") or {})
    assert services["spark"]["command"][:2] == ["txbuffer", "spark"]
    assert services["postgres"]["profiles"] == ["postgres"] and services["capture"]["profiles"] == ["postgres"]
    assert services["kafka-ui"]["profiles"] == ["ui"]


def test_compose_processor_keeps_state_on_a_named_volume_and_checks_metrics():
    svc = load_compose()["services"]["processor"]
    env = svc["environment"]
    cfg = load_config(env={k: str(v) for k, v in env.items() if k.startswith(ENV_PREFIX)})
    assert f"processor-state:{cfg.state_dir}" in svc["volumes"]
    assert cfg.metrics_port == 9108 and cfg.metrics_host == "0.0.0.0"
    assert f":{cfg.metrics_port}/metrics" in " ".join(svc["healthcheck"]["test"])


# --------------------------------------------------------------------------- Kubernetes schemas


@pytest.mark.parametrize("name, doc", k8s_documents(), ids=[n for n, _ in k8s_documents()])
def test_k8s_manifest_matches_api_schema(name, doc):
    assert k8s_errors(doc) == []


def test_k8s_manifests_cover_the_required_kinds():
    kinds = {doc["kind"] for _, doc in k8s_documents()}
    assert {"StatefulSet", "Service", "ConfigMap", "Secret", "PodDisruptionBudget"} <= kinds


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda d: d["spec"].__setitem__("volumeClaimTemplate", d["spec"].pop("volumeClaimTemplates")),
            "volumeClaimTemplate",
        ),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0].__setitem__(
                "resource", d["spec"]["template"]["spec"]["containers"][0].pop("resources")
            ),
            "resource",
        ),
        (lambda d: d["spec"].__setitem__("replicas", "four"), "four"),
    ],
    ids=["misspelled-spec-key", "misspelled-container-key", "wrong-type"],
)
def test_k8s_schema_rejects_an_invalid_copy(mutate, expected):
    doc = copy.deepcopy(statefulset())
    mutate(doc)
    errors = k8s_errors(doc)
    assert errors, "the Kubernetes schema accepted an invalid StatefulSet"
    assert any(expected in e for e in errors), errors


def test_statefulset_has_a_volume_per_replica_and_sized_resources(tmp_path):
    sts = statefulset()
    cfg = configmap_config(tmp_path)
    container = processor_container()
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == str(cfg.state_dir)
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert sts["spec"]["serviceName"] in {
        d["metadata"]["name"] for d in k8s_by_kind("Service") if d["spec"].get("clusterIP") == "None"
    }
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "256Mi"},
        "limits": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "1Gi"},
    }
    assert sts["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_metrics_port_agrees_across_config_pod_and_services(tmp_path):
    cfg = configmap_config(tmp_path)
    assert cfg.metrics_host == "0.0.0.0", "the endpoint must listen beyond loopback to be scraped"
    (port,) = processor_container()["ports"]
    assert port["containerPort"] == cfg.metrics_port
    metrics_services = [
        s for s in k8s_by_kind("Service") if s["metadata"].get("annotations", {}).get("prometheus.io/scrape")
    ]
    assert metrics_services, "no Service carries the Prometheus scrape annotations"
    for svc in metrics_services:
        assert svc["metadata"]["annotations"]["prometheus.io/port"] == str(cfg.metrics_port)
        assert [p["port"] for p in svc["spec"]["ports"]] == [cfg.metrics_port]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert processor_container()[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}


def test_pdb_selects_the_processor_pods():
    (pdb,) = k8s_by_kind("PodDisruptionBudget")
    labels = statefulset()["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_secret_holds_placeholders_only():
    for secret in k8s_by_kind("Secret"):
        for key, value in (secret.get("stringData") or {}).items():
            if "password" in key or "username" in key:
                assert value == "REPLACE_ME", f"{secret['metadata']['name']}.{key} must stay a placeholder"
        assert not secret.get("data"), "no encoded secret values in the repository"


# --------------------------------------------------------------------------- Spark submission

# spec fields of sparkoperator.k8s.io/v1beta2 SparkApplication used or plausibly used here.
SPARK_APP_SPEC_FIELDS = {
    "type",
    "pythonVersion",
    "mode",
    "image",
    "imagePullPolicy",
    "imagePullSecrets",
    "mainClass",
    "mainApplicationFile",
    "arguments",
    "sparkVersion",
    "sparkConf",
    "hadoopConf",
    "sparkConfigMap",
    "hadoopConfigMap",
    "deps",
    "driver",
    "executor",
    "restartPolicy",
    "volumes",
    "nodeSelector",
    "timeToLiveSeconds",
    "batchScheduler",
    "dynamicAllocation",
    "monitoring",
    "proxyUser",
    "failureRetries",
    "retryInterval",
    "memoryOverheadFactor",
    "sparkUIOptions",
    "driverIngressOptions",
}
SPARK_APP_POD_FIELDS = {
    "cores",
    "coreLimit",
    "coreRequest",
    "memory",
    "memoryOverhead",
    "instances",
    "serviceAccount",
    "env",
    "envFrom",
    "labels",
    "annotations",
    "volumeMounts",
    "affinity",
    "tolerations",
    "securityContext",
    "podSecurityContext",
    "nodeSelector",
    "image",
    "javaOptions",
    "initContainers",
    "sidecars",
    "deleteOnTermination",
    "terminationGracePeriodSeconds",
    "priorityClassName",
    "schedulerName",
}


def test_spark_application_uses_known_operator_fields():
    app = yaml.safe_load(SPARK_APP.read_text())
    assert (app["apiVersion"], app["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
    assert set(app["spec"]) <= SPARK_APP_SPEC_FIELDS, set(app["spec"]) - SPARK_APP_SPEC_FIELDS
    for role in ("driver", "executor"):
        assert set(app["spec"][role]) <= SPARK_APP_POD_FIELDS, set(app["spec"][role]) - SPARK_APP_POD_FIELDS
    assert app["spec"]["type"] == "Python" and app["spec"]["mode"] == "cluster"
    assert "deps" not in app["spec"] or "packages" not in app["spec"]["deps"]  # no Ivy: the image has the jars
    assert app["spec"]["image"] in SPARK_IMAGES
    mounted = {m["name"] for role in ("driver", "executor") for m in app["spec"][role]["volumeMounts"]}
    assert mounted <= {v["name"] for v in app["spec"]["volumes"]}
    assert app["spec"]["driver"]["serviceAccount"] in {d["metadata"]["name"] for d in k8s_by_kind("ServiceAccount")}


def test_spark_submit_script_targets_the_built_image_and_service_account():
    text = SPARK_SUBMIT.read_text()
    assert "--deploy-mode cluster" in text and "local:///opt/txbuffer/spark_main.py" in text
    assert "--jars" in text and "connector_jars" in text  # outside k8s: the cached Maven bundle's jars
    assert "serviceAccountName=txbuffer-spark" in text
    assert (ROOT / "deploy" / "spark" / "spark_main.py").is_file()


# --------------------------------------------------------------------------- images


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dockerfile_is_pinned_multistage_and_non_root(path):
    text = path.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
    bases = [args.get(m.group(1), m.group(0)) for m in re.finditer(r"^FROM \$\{(\w+)\}", text, re.M)]
    bases += re.findall(r"^FROM ([^$\s]\S*)", text, re.M)
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2, "multi-stage build expected"
    for base in bases:
        assert ":" in base and not base.endswith(":latest"), f"unpinned base image {base}"
    assert "python:3.11-slim-bookworm" in bases
    user = re.findall(r"^USER (\S+)", text, re.M)[-1]
    assert not user.startswith(("root", "0")), f"final stage runs as {user}"
    assert re.search(r"^ENTRYPOINT ", text, re.M)


def test_processor_image_exposes_metrics_and_has_a_healthcheck():
    text = DOCKERFILES[0].read_text()
    assert 'ENTRYPOINT ["txbuffer"]' in text
    assert re.search(r"^EXPOSE 9108$", text, re.M)
    assert re.search(r"^HEALTHCHECK ", text, re.M) and "/metrics" in text
    assert re.search(r'^VOLUME \["/var/lib/txbuffer/state"\]', text, re.M)


def test_dockerignore_keeps_the_build_context_small():
    lines = (ROOT / ".dockerignore").read_text().split()
    assert lines[lines.index("**")] == "**", "start from an empty context"
    for needed in ("!pyproject.toml", "!processor/", "!schemas/"):
        assert needed in lines


# --------------------------------------------------------------------------- cross-file consistency


def txbuffer_env_names() -> dict[str, set[str]]:
    """TXBUFFER_* name -> files that set it."""
    found: dict[str, set[str]] = {}

    def add(name: str, where: str) -> None:
        if name.startswith(ENV_PREFIX):
            found.setdefault(name, set()).add(where)

    for svc in load_compose()["services"].values():
        env = svc.get("environment") or {}
        names = env.keys() if isinstance(env, dict) else [e.split("=", 1)[0] for e in env]
        for name in names:
            add(name, COMPOSE.name)
    pod_specs = [d["spec"]["template"]["spec"] for d in k8s_by_kind("StatefulSet")]
    spark_app = yaml.safe_load(SPARK_APP.read_text())
    pod_specs += [{"containers": [spark_app["spec"]["driver"], spark_app["spec"]["executor"]]}]
    for spec in pod_specs:
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            for item in container.get("env") or []:
                add(item["name"], "kubernetes")
    for name in re.findall(r"(?:driverEnv|executorEnv)\.(TXBUFFER_\w+)", SPARK_SUBMIT.read_text()):
        add(name, SPARK_SUBMIT.name)
    for path in DOCKERFILES:
        for name in re.findall(r"\b(TXBUFFER_[A-Z0-9_]+)=", path.read_text()):
            add(name, str(path.relative_to(ROOT)))
    return found


def test_every_txbuffer_env_var_names_a_config_field():
    names = txbuffer_env_names()
    assert names, "expected TXBUFFER_* settings in the manifests"
    fields = {ENV_PREFIX + f.upper() for f in ProcessorConfig.model_fields}
    unknown = {n: sorted(w) for n, w in names.items() if n not in fields and n not in NON_CONFIG_ENV}
    assert unknown == {}, f"TXBUFFER_* variables that are no ProcessorConfig field: {unknown}"
    for name, reader in NON_CONFIG_ENV.items():
        assert name in reader.read_text(), f"{name} is allowed because {reader.name} reads it, but it no longer does"


def test_compose_env_values_validate_as_config():
    for _name, svc in load_compose()["services"].items():
        env = {k: str(v) for k, v in (svc.get("environment") or {}).items() if k.startswith(ENV_PREFIX)}
        env = {k: v for k, v in env.items() if k not in NON_CONFIG_ENV}
        if env:
            load_config(env=env)  # raises ConfigError naming the field


def test_configmap_config_yaml_loads_with_load_config(tmp_path):
    cfg = configmap_config(tmp_path)
    assert cfg.raw_topic == "txbuffer.raw"
    assert str(cfg.state_dir) == "/var/lib/txbuffer/state"


# --------------------------------------------------------------------------- CLI arguments in the manifests


def _env_dict(env) -> dict[str, str]:
    if isinstance(env, dict):
        return {k: str(v) for k, v in env.items()}
    return {e["name"]: str(e.get("value", "")) for e in env or [] if isinstance(e, dict)} or dict(
        item.split("=", 1) for item in env or [] if isinstance(item, str) and "=" in item
    )


def cli_invocations() -> list[tuple[str, list[str], dict[str, str]]]:
    """(where, argv after `txbuffer`, the container's environment) for every txbuffer command line."""
    calls = []
    for name, svc in load_compose()["services"].items():
        image = svc.get("image")
        command = svc.get("command")
        env = _env_dict(svc.get("environment"))
        if isinstance(command, str):
            command = shlex.split(command)
        if image in TXBUFFER_IMAGES:
            calls.append((f"compose:{name}", list(command or ["run"]), env))
        elif image in SPARK_IMAGES and command and command[0] == "txbuffer":
            calls.append((f"compose:{name}", command[1:], env))
    container = processor_container()
    calls.append(("k8s:statefulset", list(container["args"]), _env_dict(container.get("env"))))
    app = yaml.safe_load(SPARK_APP.read_text())["spec"]
    calls.append(("sparkapplication", list(app["arguments"]), _env_dict(app.get("driver", {}).get("env"))))
    return calls


def registered_parser(monkeypatch):
    """The real CLI parser, built from whichever command modules exist in this checkout."""
    present = [m for m in cli.COMMAND_MODULES if importlib.util.find_spec(m) is not None]
    monkeypatch.setattr(cli, "COMMAND_MODULES", present)
    return cli.build_parser()


@pytest.mark.parametrize("where, argv, env", cli_invocations(), ids=[w for w, _, _ in cli_invocations()])
def test_manifest_command_lines_parse_with_the_cli(where, argv, env, monkeypatch, capsys):
    for name in [n for n in os.environ if n.startswith("TXBUFFER_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():  # the container's environment, as the command sees it there
        monkeypatch.setenv(name, value)
    parser = registered_parser(monkeypatch)
    subparsers = next(a for a in parser._actions if a.dest == "command")
    command = next(a for a in argv if not a.startswith("-") and a not in {"json", "console", "INFO", "DEBUG"})
    if command not in subparsers.choices:
        pytest.skip(f"`txbuffer {command}` is not registered in processor/cli/app.py yet")
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(
            f"{where}: `txbuffer {shlex.join(argv)}` is rejected by the CLI: {capsys.readouterr().err}"
            f" (exit {exc.code})"
        )


# --------------------------------------------------------------------------- sizing arithmetic


def sizing_module():
    spec = importlib.util.spec_from_file_location("deploy_sizing", ROOT / "deploy" / "sizing.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


def test_sizing_survives_one_instance_down_and_keeps_headroom():
    sizing = sizing_module()
    for throughput in (20_000, 50_000, 137_000, 1_000_000):
        s = sizing.size(1_000_000, throughput, 300)
        assert (s.instances - 1) * throughput >= 1_000_000
        assert s.per_instance_rate <= 0.6 * throughput
        assert s.partitions >= s.instances and s.disk_gib >= 10


def test_sizing_example_table_matches_the_script():
    sizing = sizing_module()
    text = (ROOT / "deploy" / "SIZING.md").read_text()
    for throughput in (50_000, 100_000):
        s = sizing.size(1_000_000, throughput, 300)
        row = f"| {throughput:,} | 300 | {s.instances} | {s.partitions} | {s.disk_gib}Gi |"
        assert row in text, row


def test_spark_connectors_are_pinned_to_the_pinned_pyspark():
    """One Spark release everywhere: the pom the image and the local cache resolve, and the pyspark pin."""
    import re
    import tomllib

    pom = (ROOT / "deploy" / "maven" / "spark" / "pom.xml").read_text()
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["spark"]
    (pyspark,) = [re.fullmatch(r"pyspark==(\S+)", p).group(1) for p in pins if p.startswith("pyspark")]
    assert f"<spark.version>{pyspark}</spark.version>" in pom
    for artifact in ("spark-sql-kafka-0-10_2.13", "spark-avro_2.13", "delta-spark_2.13"):
        assert f"<artifactId>{artifact}</artifactId>" in pom
    dockerfile = (ROOT / "deploy" / "spark" / "Dockerfile").read_text()
    assert "COPY deploy/maven/spark/pom.xml" in dockerfile and "dependency:copy-dependencies" in dockerfile
