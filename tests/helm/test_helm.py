"""The Helm chart (helm/lsmlake) and the image (Dockerfile).

The chart is rendered in-process by helm-python-sdk, which binds Helm's own Go library (no helm
binary, no cluster). Every rendered object is validated against the Kubernetes OpenAPI schemas of
kubernetes-validate in strict mode, and the containers are checked against the package itself: each
command is a console script of pyproject.toml, and each service's `Settings.from_args` accepts the
flags and environment the chart gives it.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT

helm = pytest.importorskip("helm_python", reason="needs helm-python-sdk (the test extra)")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="needs kubernetes-validate (the test extra)")

CHART = ROOT / "helm" / "lsmlake"
DOCKERFILE = ROOT / "Dockerfile"
# a recent release that kubernetes-validate ships schemas for; the chart needs >= 1.27 (grpc probes)
KUBE_VERSION = "1.35.0"
RELEASE, NAMESPACE = "lake", "data"

S3_SECRET = {"warehouse": {"uri": "s3://lake-bucket/warehouse",
                           "s3": {"region": "eu-west-1", "endpoint": "http://minio.storage:9000",
                                  "credentials": {"existingSecret": "lake-s3", "accessKeyIdKey": "id",
                                                  "secretAccessKeyKey": "key"}}}}
POSTGRES_SECRET = {"catalog": {"replicas": 3, "metastore": {"type": "postgresql", "postgresql": {
    "existingSecret": "lake-metastore", "existingSecretKey": "dsn"}}}}
SPARK_K8S = {"compactor": {"spark": {"mode": "kubernetes", "conf": {"spark.task.maxFailures": "4"},
                                     "kubernetes": {"executor": {"instances": 4, "cores": 2, "memory": "3g",
                                                                 "memoryOverhead": "4g", "limitCores": "2",
                                                                 "nodeSelector": {"pool": "spark"}}}}},
             "imagePullSecrets": [{"name": "registry"}, {"name": "mirror"}]}


def _merge(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        _merge_into(out, copy.deepcopy(part))
    return out


def _merge_into(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge_into(target[k], v)
        else:
            target[k] = v


VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "postgresql-secret": POSTGRES_SECRET,
    "postgresql-created": {"catalog": {"replicas": 2, "metastore": {"type": "postgresql", "postgresql": {
        "url": "postgresql://lsmlake:pw@postgres:5432/lake?schema=lsmlake"}}}},
    "s3-credentials-secret": S3_SECRET,
    "s3-credentials-created": {"warehouse": {"s3": {"credentials": {
        "accessKeyId": "AKIA-CHART-CREATED", "secretAccessKey": "secret-of-the-chart-created-secret"}}}},
    "s3-all-settings": _merge(SPARK_K8S, S3_SECRET, {"warehouse": {"s3": {
        "pathStyle": True, "credentials": {"sessionTokenKey": "token"}}}}),
    "s3-workload-identity": _merge(SPARK_K8S, {
        "warehouse": {"s3": {"region": "eu-west-1", "pathStyle": "false"}},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/lake"}}}),
    "spark-on-kubernetes": _merge(SPARK_K8S, S3_SECRET),
    "hpa-off": {"writer": {"autoscaling": {"enabled": False}, "replicas": 3,
                           "ingest": ["shop.orders:debezium", "shop.clicks"]}},
    "network-policies-off": {"networkPolicy": {"enabled": False}},
    "egress-restricted": _merge(SPARK_K8S, {"networkPolicy": {"egress": {"allowAll": False, "extraRules": [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443, "protocol": "TCP"}]}]}}}),
    "three-compactors": {"compactor": {"replicas": 3, "databasePriority": {"gold": 2, "bronze": -1},
                                       "databaseShare": {"gold": 4}}},
    "tls-and-tokens": {"security": {"tls": {"secretName": "lake-tls"}, "auth": {
        "tokensSecret": "lake-tokens", "serviceTokensSecret": "lake-service-tokens"}},
                       "catalog": {"rest": {"port": 8443}, "ui": {"port": 9443}}},
    "rest-off": {"catalog": {"rest": {"enabled": False}}},
    "ui-off": {"catalog": {"ui": {"enabled": False}}},
    "mutual-tls-kafka-sasl-ssl": {
        "security": {"tls": {"secretName": "lake-tls", "mutual": True, "healthPort": 50070},
                     "auth": {"tokensSecret": "lake-tokens", "tokensKey": "t.json",
                              "serviceTokensSecret": "lake-service-tokens"}},
        "kafka": {"security": {"protocol": "SASL_SSL", "saslMechanism": "SCRAM-SHA-512", "saslUsername": "lake",
                               "saslPasswordSecret": "lake-kafka", "caSecret": "kafka-ca"}}},
    "file-warehouse-no-metrics": {"warehouse": {"uri": "file:///data/warehouse/lake",
                                                "persistence": {"existingClaim": "lake-rwx"}},
                                  "metrics": {"enabled": False}, "catalog": {"extraArgs": ["--grace", "20"]}},
}


@functools.cache
def _chart() -> Any:
    return helm.Chart.load(CHART)


@functools.cache
def _render(name: str) -> tuple[dict[str, Any], ...]:
    manifests = _chart().render(values=VALUE_SETS[name], name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return tuple(objects)


def render(name: str) -> list[dict[str, Any]]:
    """The objects the chart renders for a value set (deep copies: tests may change them)."""
    return copy.deepcopy(list(_render(name)))


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def executor_templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Spark executor pod templates held in ConfigMaps."""
    return [yaml.safe_load(text) for cm in of_kind(objects, "ConfigMap")
            for key, text in cm.get("data", {}).items() if key.endswith("-pod.yaml")]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, pod metadata, pod spec) of every Deployment, and of the executor pod template."""
    for d in of_kind(objects, "Deployment"):
        yield d["metadata"]["name"], d["spec"]["template"]["metadata"], d["spec"]["template"]["spec"]
    for t in executor_templates(objects):
        yield "spark-executor", t["metadata"], t["spec"]


def parse_flags(args: list[str]) -> dict[str, list[str]]:
    """`--flag=value` and `--flag value` items as {flag: [values]}, in order."""
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        item = args[i]
        assert item.startswith("--"), f"stray argument {item!r} in {args}"
        name, sep, value = item.partition("=")
        if not sep and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value, i = args[i + 1], i + 1
        flags.setdefault(name, []).append(value)
        i += 1
    return flags


def flag(container: dict[str, Any], name: str) -> str:
    values = parse_flags(container["args"]).get(name, [])
    assert len(values) == 1, f"{container['name']}: {name} given {len(values)} times"
    return values[0]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def service_settings_class(command: str) -> Any:
    """The `Settings` class of the service whose console script is `command` (from pyproject.toml)."""
    target = console_scripts()[command]
    module_name, _, func_name = target.partition(":")
    main = getattr(importlib.import_module(module_name), func_name)
    return sys.modules[main.__module__].Settings


@functools.cache
def console_scripts() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"]["scripts"])


# stand-ins for what Kubernetes fills in at run time; from_args connects nowhere
FIELD_VALUES = {"metadata.name": "lake-lsmlake-pod-0", "status.podIP": "192.0.2.10"}
SECRET_VALUES = {"LSMLAKE_METASTORE": "postgresql://lsmlake:secret@postgres.invalid:5432/lake?schema=lsmlake"}


# what the Secrets the chart mounts hold, by Secret name and key (written out by `mount_secrets`)
SECRET_FILES = {"lake-tls": ("tls.crt", "tls.key", "ca.crt"), "lake-tokens": ("tokens.json", "t.json"),
                "lake-service-tokens": ("writer", "compactor"), "kafka-ca": ("ca.crt",)}


@functools.cache
def _secret_contents(root: str) -> dict[str, str]:
    """PEM files of a test CA and server, a token file and service tokens (file name -> text)."""
    from tests.support.certs import make_certs

    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    certs = make_certs(folder)
    token = "a-service-token-of-role-writer"
    tokens = json.dumps({"tokens": [{"principal": "svc", "role": "writer", "token": token}]})
    return {"tls.crt": Path(certs.server_cert).read_text(), "tls.key": Path(certs.server_key).read_text(),
            "ca.crt": Path(certs.ca).read_text(), "tokens.json": tokens, "t.json": tokens, "writer": token,
            "compactor": token}


def mount_secrets(pod_spec: dict[str, Any], container: dict[str, Any], root: Path) -> None:
    """Write, below `root`, the files the container's Secret volumes would show at their mount paths."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    contents = _secret_contents(str(root / "_generated"))
    for m in container.get("volumeMounts", []):
        secret = volumes[m["name"]].get("secret")
        if secret is None:
            continue
        folder = root / m["mountPath"].lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        items = secret.get("items") or [{"key": k, "path": k} for k in SECRET_FILES[secret["secretName"]]]
        for item in items:
            assert item["key"] in SECRET_FILES[secret["secretName"]], f"{secret['secretName']} has no {item['key']}"
            (folder / item["path"]).write_text(contents[item["key"]])


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the process sees it, with secrets and fields replaced by stand-ins."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "secretKeyRef" in e["valueFrom"]:
            env[e["name"]] = SECRET_VALUES.get(e["name"], "from-a-secret")
        else:
            env[e["name"]] = FIELD_VALUES[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion of command arguments."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def workload_containers(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for d in of_kind(objects, "Deployment"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            yield d, c


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def spark_conf(container: dict[str, Any]) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in parse_flags(container["args"]).get("--spark-conf", []))


VALUE_SET_NAMES = sorted(VALUE_SETS)


# ---------------------------------------------------------------------------------------------------
# every value set


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_every_object_is_valid_kubernetes(value_set: str) -> None:
    objects = render(value_set)
    assert objects
    for obj in [*objects, *executor_templates(objects)]:
        what = f"{obj['kind']}/{obj.get('metadata', {}).get('name', '(template)')}"
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{value_set}: {what} invalid at {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            pytest.fail(f"{value_set}: {what}: {e.message}")


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_object_names_are_unique_and_labelled(value_set: str) -> None:
    objects = render(value_set)
    keys = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), keys
    for o in objects:
        labels = o["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert len(o["metadata"]["name"]) <= 63


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_probe_and_service_ports_are_the_services_port_flags(value_set: str) -> None:
    objects = render(value_set)
    services = of_kind(objects, "Service")
    for deployment, c in workload_containers(objects):
        port = int(flag(c, "--port"))
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["grpc"] == port
        # with TLS the kubelet (which cannot speak TLS) probes the plaintext health port
        env = container_env(c)
        probed = int(env["LSMLAKE_HEALTH_PORT"]) if "LSMLAKE_TLS_CERT" in env else port
        assert ports.get("health", port) == probed
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert c[probe]["grpc"]["port"] == probed, f"{c['name']} {probe}"
        # the Service publishes the gRPC port and, on the catalog, the REST and console ports, each where its
        # flag says
        flagged = {"grpc": port}
        for name, http_flag in (("rest", "--rest-port"), ("ui", "--ui-port")):
            if http_flag in parse_flags(c["args"]):
                flagged[name] = int(flag(c, http_flag))
            assert ports.get(name) == flagged.get(name), f"{c['name']} {name}"
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        grpc_services = [s for s in services if s["spec"].get("clusterIP") != "None"
                         and matches(s["spec"]["selector"], pod_labels)]
        assert len(grpc_services) == 1, f"{c['name']}: {len(grpc_services)} gRPC Services"
        service_ports = grpc_services[0]["spec"]["ports"]
        assert [sp["name"] for sp in service_ports] == list(flagged), c["name"]
        for sp in service_ports:
            target = sp["targetPort"]
            assert (ports[target] if isinstance(target, str) else target) == flagged[sp["name"]]
            assert sp["port"] == flagged[sp["name"]]
        annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
        if "--metrics-port" in parse_flags(c["args"]):
            metrics = int(flag(c, "--metrics-port"))
            assert ports["metrics"] == metrics
            assert annotations["prometheus.io/scrape"] == "true"
            assert int(annotations["prometheus.io/port"]) == metrics
        else:
            assert "metrics" not in ports and "prometheus.io/scrape" not in annotations


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_commands_are_console_scripts_that_accept_the_flags(value_set: str, tmp_path: Path) -> None:
    """Each container runs a console script of pyproject.toml, and that service's `Settings.from_args`
    accepts the rendered flags with the rendered environment (and the files of the Secrets it mounts)."""
    objects = render(value_set)
    values = _chart().merge_values(VALUE_SETS[value_set])
    catalog_service = named(objects, "Service", f"{RELEASE}-lsmlake-catalog")
    [grpc_port] = [p["port"] for p in catalog_service["spec"]["ports"] if p["name"] == "grpc"]
    catalog_address = f"{catalog_service['metadata']['name']}:{grpc_port}"
    seen = set()
    for deployment, c in workload_containers(objects):
        assert len(c["command"]) == 1 and c["command"][0] in console_scripts(), c["command"]
        command = c["command"][0]
        seen.add(command)
        root = tmp_path / command
        mount_secrets(deployment["spec"]["template"]["spec"], c, root)
        env = {k: str(root) + v if v.startswith("/etc/lsmlake/") else v for k, v in container_env(c).items()}
        argv = [expand(a, env) for a in c["args"]]
        assert not any("$(" in a for a in argv), f"{command}: unexpanded variable in {argv}"
        try:
            settings = service_settings_class(command).from_args(argv, env=env)
        except SystemExit:
            pytest.fail(f"{value_set}: {command} refuses {argv} (see the usage message above)")
        assert settings.host == "0.0.0.0"
        assert settings.port == int(flag(c, "--port"))
        assert settings.warehouse == values["warehouse"]["uri"]
        assert settings.kafka == values["kafka"]["bootstrap"]
        expected_metrics = int(flag(c, "--metrics-port")) if values["metrics"]["enabled"] else None
        assert settings.metrics_port == expected_metrics
        if command != "catalog-svc":
            assert settings.catalog == catalog_address
        else:
            rest, ui = values["catalog"]["rest"], values["catalog"]["ui"]
            assert settings.rest_port == (rest["port"] if rest["enabled"] else None)
            assert settings.ui_port == (ui["port"] if ui["enabled"] else None)
        if command == "compactor-svc":
            c_values = values["compactor"]
            assert (dict(settings.weights.priority), dict(settings.weights.share)) == (
                c_values["databasePriority"], c_values["databaseShare"])
    assert seen == {"catalog-svc", "writer-svc", "compactor-svc"}


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_every_pod_runs_non_root_with_a_read_only_root(value_set: str) -> None:
    objects = render(value_set)
    specs = list(pod_specs(objects))
    assert len(specs) >= 3
    for name, _, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["runAsUser"] != 0, name
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", name
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True and sc.get("runAsUser", pod["runAsUser"]) != 0, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc.get("privileged", False) is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert "emptyDir" in volumes[mounts["/tmp"]], f"{name}: /tmp is not an emptyDir"
            if c.get("command") == ["writer-svc"]:
                spill = flag(c, "--spill-dir")
                assert "emptyDir" in volumes[mounts[spill]], f"{name}: the spill dir is not an emptyDir"
        if not spec["automountServiceAccountToken"]:
            continue
        # only the Spark drivers talk to the API server
        assert "compactor" in name and spark_conf(spec["containers"][0]), name


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_selectors_find_the_pods(value_set: str) -> None:
    objects = render(value_set)
    pods = {name: meta["labels"] for name, meta, _ in pod_specs(objects)}
    deployments = {d["metadata"]["name"]: d for d in of_kind(objects, "Deployment")}
    for d in deployments.values():
        assert matches(d["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])
    for o in [*of_kind(objects, "Service"), *of_kind(objects, "PodDisruptionBudget")]:
        selector = o["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert sum(matches(selector, labels) for labels in pods.values()) == 1, o["metadata"]["name"]
    for np in of_kind(objects, "NetworkPolicy"):
        assert sum(matches(np["spec"]["podSelector"]["matchLabels"], labels) for labels in pods.values()) == 1
    for hpa in of_kind(objects, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] in deployments


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_every_container_has_requests_and_limits(value_set: str) -> None:
    for _, c in workload_containers(render(value_set)):
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), c["name"]
        assert {"cpu", "memory"} <= set(c["resources"]["limits"]), c["name"]


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_logs_are_json(value_set: str) -> None:
    objects = render(value_set)
    for name, _, spec in pod_specs(objects):
        for c in spec["containers"]:
            assert env_of(c)["LSMLAKE_LOG_FORMAT"]["value"] == "json", name


def test_helm_lint_is_clean() -> None:
    for value_set in ("default", "spark-on-kubernetes", "postgresql-secret"):
        report = helm.lint(CHART, VALUE_SETS[value_set], strict=True, namespace=NAMESPACE,
                           kube_version=f"v{KUBE_VERSION}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not report["errors"] and not problems, (value_set, report)


# ---------------------------------------------------------------------------------------------------
# particular value sets


def _container(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    d = named(objects, "Deployment", f"{RELEASE}-lsmlake-{component}")
    [c] = d["spec"]["template"]["spec"]["containers"]
    return c


def test_defaults_one_sqlite_catalog_autoscaled_writers_local_spark() -> None:
    objects = render("default")
    catalog = named(objects, "Deployment", f"{RELEASE}-lsmlake-catalog")
    assert catalog["spec"]["replicas"] == 1
    assert catalog["spec"]["strategy"]["type"] == "Recreate"
    c = _container(objects, "catalog")
    assert flag(c, "--metastore").startswith("sqlite:////var/lib/lsmlake/metastore/")
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/var/lib/lsmlake/metastore"}
    named(objects, "PersistentVolumeClaim", f"{RELEASE}-lsmlake-catalog-metastore")
    writer = named(objects, "Deployment", f"{RELEASE}-lsmlake-writer")
    assert "replicas" not in writer["spec"]
    hpa = named(objects, "HorizontalPodAutoscaler", f"{RELEASE}-lsmlake-writer")
    assert hpa["apiVersion"] == "autoscaling/v2"
    [metric] = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu" and metric["resource"]["target"]["type"] == "Utilization"
    assert flag(_container(objects, "compactor"), "--spark-master") == "local[2]"
    assert not of_kind(objects, "Role") and not of_kind(objects, "Secret")
    assert {p["metadata"]["name"] for p in of_kind(objects, "PodDisruptionBudget")} == {
        f"{RELEASE}-lsmlake-{x}" for x in ("catalog", "writer", "compactor")}
    policies = of_kind(objects, "NetworkPolicy")
    assert len(policies) == 3
    assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)


def test_catalog_network_policy_admits_writers_compactors_clients_and_prometheus() -> None:
    objects = render("default")
    policy = named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-catalog")
    grpc_rule, metrics_rule = policy["spec"]["ingress"]
    sources = [peer["podSelector"]["matchLabels"] for peer in grpc_rule["from"]]
    assert {"lsmlake.io/client": "true"} in sources
    components = {s.get("app.kubernetes.io/component") for s in sources}
    assert components >= {"writer", "compactor"}
    # the REST catalog and console ports admit the same pods as gRPC
    assert grpc_rule["ports"] == [{"port": 50051, "protocol": "TCP"}, {"port": 8181, "protocol": "TCP"},
                                  {"port": 8080, "protocol": "TCP"}]
    assert metrics_rule["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]
    assert metrics_rule["ports"] == [{"port": 9101, "protocol": "TCP"}]
    writer = named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-writer")
    assert [p["podSelector"]["matchLabels"] for p in writer["spec"]["ingress"][0]["from"]] == [
        {"lsmlake.io/client": "true"}]


def _notes(values: dict[str, Any]) -> str:
    manifests = _chart().render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    [notes] = [text for path, text in manifests.items() if path.endswith("NOTES.txt")]
    return str(notes)


@pytest.mark.parametrize("value_set", ["default", "tls-and-tokens", "mutual-tls-kafka-sasl-ssl"])
def test_catalog_serves_exposes_and_admits_the_rest_port(value_set: str, tmp_path: Path) -> None:
    """Paimon's REST catalog API: `--rest-port`, a container port and a Service port named `rest`, the
    NetworkPolicy's gRPC peers let in, and the TLS and token files of gRPC in the settings the REST server
    is built from."""
    values = _chart().merge_values(VALUE_SETS[value_set])
    objects = render(value_set)
    rest_port = values["catalog"]["rest"]["port"]
    tls = bool(values["security"]["tls"]["secretName"])
    assert rest_port == (8443 if value_set == "tls-and-tokens" else 8181)
    deployment = named(objects, "Deployment", f"{RELEASE}-lsmlake-catalog")
    c = _container(objects, "catalog")
    assert int(flag(c, "--rest-port")) == rest_port
    assert {"name": "rest", "containerPort": rest_port, "protocol": "TCP"} in c["ports"]
    service = named(objects, "Service", f"{RELEASE}-lsmlake-catalog")
    [sp] = [p for p in service["spec"]["ports"] if p["name"] == "rest"]
    assert sp == {"name": "rest", "port": rest_port, "targetPort": "rest", "protocol": "TCP",
                  "appProtocol": "https" if tls else "http"}
    policy = named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-catalog")
    [rule] = [r for r in policy["spec"]["ingress"] if {"port": values["catalog"]["port"], "protocol": "TCP"}
              in r["ports"]]
    assert {"port": rest_port, "protocol": "TCP"} in rule["ports"]
    root = tmp_path / "catalog"
    mount_secrets(deployment["spec"]["template"]["spec"], c, root)
    env = {k: str(root) + v if v.startswith("/etc/lsmlake/") else v for k, v in container_env(c).items()}
    s = service_settings_class("catalog-svc").from_args(c["args"], env=env)
    assert s.rest_port == rest_port
    # catalog_svc.server hands these to the REST server: the gRPC port's certificate and token file
    if tls:
        assert s.security.tls_cert == f"{root}/etc/lsmlake/tls/tls.crt"
        assert s.security.tls_key == f"{root}/etc/lsmlake/tls/tls.key"
        assert s.security.auth_tokens is not None and s.security.auth_tokens.startswith(f"{root}/etc/lsmlake/auth/")
    else:
        assert s.security.tls_cert is None and s.security.auth_tokens is None
    scheme = "https" if tls else "http"
    assert f"REST catalog (Paimon metastore=rest): {scheme}://{RELEASE}-lsmlake-catalog:{rest_port}" in _notes(
        VALUE_SETS[value_set])


def test_rest_port_can_be_turned_off() -> None:
    objects = render("rest-off")
    c = _container(objects, "catalog")
    assert "--rest-port" not in parse_flags(c["args"]) and "LSMLAKE_REST_PORT" not in env_of(c)
    assert "rest" not in {p["name"] for p in c["ports"]}
    service = named(objects, "Service", f"{RELEASE}-lsmlake-catalog")
    assert [p["name"] for p in service["spec"]["ports"]] == ["grpc", "ui"]  # the console stays
    policy = named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-catalog")
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 50051, "protocol": "TCP"},
                                                     {"port": 8080, "protocol": "TCP"}]
    assert service_settings_class("catalog-svc").from_args(c["args"], env=container_env(c)).rest_port is None
    assert "REST catalog" not in _notes(VALUE_SETS["rest-off"])


@pytest.mark.parametrize("values", [{"catalog": {"rest": {"port": 50051}}}, {"catalog": {"rest": {"port": 9101}}},
                                    {"security": {"tls": {"secretName": "t", "healthPort": 8181}}}])
def test_rest_port_may_not_be_another_port_of_the_catalog(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmRenderError, match="catalog.rest.port"):
        _chart().render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)


@pytest.mark.parametrize("value_set", ["default", "tls-and-tokens", "mutual-tls-kafka-sasl-ssl"])
def test_catalog_serves_exposes_and_admits_the_console_port(value_set: str, tmp_path: Path) -> None:
    """The web console: `--ui-port`, a container port and a Service port named `ui` (not probed: the kubelet
    stays on gRPC), the NetworkPolicy's gRPC peers let in, the TLS and token files of gRPC in the settings the
    console's HTTP server is built from, and its address in the NOTES."""
    values = _chart().merge_values(VALUE_SETS[value_set])
    objects = render(value_set)
    ui_port = values["catalog"]["ui"]["port"]
    tls = bool(values["security"]["tls"]["secretName"])
    tokens = bool(values["security"]["auth"]["tokensSecret"])
    assert ui_port == (9443 if value_set == "tls-and-tokens" else 8080)
    deployment = named(objects, "Deployment", f"{RELEASE}-lsmlake-catalog")
    c = _container(objects, "catalog")
    assert int(flag(c, "--ui-port")) == ui_port
    assert {"name": "ui", "containerPort": ui_port, "protocol": "TCP"} in c["ports"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert "grpc" in c[probe] and ui_port not in c[probe]["grpc"].values(), probe
    service = named(objects, "Service", f"{RELEASE}-lsmlake-catalog")
    [sp] = [p for p in service["spec"]["ports"] if p["name"] == "ui"]
    assert sp == {"name": "ui", "port": ui_port, "targetPort": "ui", "protocol": "TCP",
                  "appProtocol": "https" if tls else "http"}
    # a console session lives in one replica: with tokens (a login), a browser must keep reaching it
    assert service["spec"].get("sessionAffinity") == ("ClientIP" if tokens else None)
    policy = named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-catalog")
    [rule] = [r for r in policy["spec"]["ingress"] if {"port": values["catalog"]["port"], "protocol": "TCP"}
              in r["ports"]]
    assert {"port": ui_port, "protocol": "TCP"} in rule["ports"]
    assert {"lsmlake.io/client": "true"} in [peer["podSelector"]["matchLabels"] for peer in rule["from"]]
    root = tmp_path / "catalog"
    mount_secrets(deployment["spec"]["template"]["spec"], c, root)
    env = {k: str(root) + v if v.startswith("/etc/lsmlake/") else v for k, v in container_env(c).items()}
    s = service_settings_class("catalog-svc").from_args(c["args"], env=env)
    assert s.ui_port == ui_port and s.ui_port != s.rest_port
    # catalog_svc.server hands these to the console's HTTP server, as to the REST server
    if tls:
        assert s.security.tls_cert == f"{root}/etc/lsmlake/tls/tls.crt"
        assert s.security.tls_key == f"{root}/etc/lsmlake/tls/tls.key"
    else:
        assert s.security.tls_cert is None
    if tokens:
        assert s.security.auth_tokens is not None and s.security.auth_tokens.startswith(f"{root}/etc/lsmlake/auth/")
    else:
        assert s.security.auth_tokens is None
    notes = _notes(VALUE_SETS[value_set])
    assert f"Web console: {'https' if tls else 'http'}://{RELEASE}-lsmlake-catalog:{ui_port}/" in notes
    assert f"port-forward svc/{RELEASE}-lsmlake-catalog {ui_port}\n" in notes
    assert ("log in at /login with a token of role reader" in notes) == tokens


def test_ui_port_can_be_turned_off() -> None:
    objects = render("ui-off")
    c = _container(objects, "catalog")
    assert "--ui-port" not in parse_flags(c["args"]) and "LSMLAKE_UI_PORT" not in env_of(c)
    assert "ui" not in {p["name"] for p in c["ports"]}
    service = named(objects, "Service", f"{RELEASE}-lsmlake-catalog")
    assert [p["name"] for p in service["spec"]["ports"]] == ["grpc", "rest"]  # the REST catalog stays
    policy = named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-catalog")
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 50051, "protocol": "TCP"},
                                                     {"port": 8181, "protocol": "TCP"}]
    settings = service_settings_class("catalog-svc").from_args(c["args"], env=container_env(c))
    assert settings.ui_port is None and settings.rest_port == 8181
    notes = _notes(VALUE_SETS["ui-off"])
    assert "Web console" not in notes and ":8080" not in notes


@pytest.mark.parametrize("values", [{"catalog": {"ui": {"port": 50051}}}, {"catalog": {"ui": {"port": 9101}}},
                                    {"catalog": {"ui": {"port": 8181}}},
                                    {"security": {"tls": {"secretName": "t", "healthPort": 8080}}}])
def test_ui_port_may_not_be_another_port_of_the_catalog(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmRenderError, match="catalog.ui.port"):
        _chart().render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def test_ui_port_may_reuse_the_port_of_a_part_that_is_off() -> None:
    """A port is only taken by what is served: with the REST catalog off, the console may have 8181."""
    values = {"catalog": {"rest": {"enabled": False}, "ui": {"port": 8181}}}
    manifests = _chart().render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = [doc for path, text in manifests.items() if not path.endswith("NOTES.txt")
               for doc in yaml.safe_load_all(text) if doc]
    c = _container(objects, "catalog")
    assert int(flag(c, "--ui-port")) == 8181 and "--rest-port" not in parse_flags(c["args"])


def test_sqlite_metastore_refuses_several_catalog_replicas() -> None:
    with pytest.raises(helm.HelmRenderError, match="postgresql"):
        _chart().render(values={"catalog": {"replicas": 2}}, name=RELEASE, namespace=NAMESPACE)


def test_postgresql_url_comes_from_the_existing_secret() -> None:
    objects = render("postgresql-secret")
    catalog = named(objects, "Deployment", f"{RELEASE}-lsmlake-catalog")
    assert catalog["spec"]["replicas"] == 3
    assert "strategy" not in catalog["spec"]
    c = _container(objects, "catalog")
    assert "--metastore" not in parse_flags(c["args"]), "the URL holds a password: never a flag"
    assert env_of(c)["LSMLAKE_METASTORE"]["valueFrom"]["secretKeyRef"] == {"name": "lake-metastore", "key": "dsn"}
    assert not of_kind(objects, "PersistentVolumeClaim") and not of_kind(objects, "Secret")
    settings = service_settings_class("catalog-svc").from_args(c["args"], env=container_env(c))
    assert settings.metastore == SECRET_VALUES["LSMLAKE_METASTORE"]


def test_postgresql_url_from_values_becomes_a_secret() -> None:
    objects = render("postgresql-created")
    [secret] = of_kind(objects, "Secret")
    ref = env_of(_container(objects, "catalog"))["LSMLAKE_METASTORE"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert secret["stringData"][ref["key"]] == "postgresql://lsmlake:pw@postgres:5432/lake?schema=lsmlake"


@pytest.mark.parametrize("value_set", ["s3-credentials-secret", "s3-credentials-created", "spark-on-kubernetes"])
def test_s3_keys_reach_every_pod_from_the_secret(value_set: str) -> None:
    objects = render(value_set)
    secrets = {s["metadata"]["name"]: s for s in of_kind(objects, "Secret")}
    specs = list(pod_specs(objects))
    assert len(specs) == (4 if value_set == "spark-on-kubernetes" else 3)
    for name, _, spec in specs:
        env = env_of(spec["containers"][0])
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            ref = env[var]["valueFrom"]["secretKeyRef"]
            if value_set == "s3-credentials-created":
                assert ref["key"] in secrets[ref["name"]]["stringData"], name
            else:
                assert ref == {"name": "lake-s3", "key": "id" if var == "AWS_ACCESS_KEY_ID" else "key"}, name
        if value_set != "s3-credentials-created":
            assert env["AWS_DEFAULT_REGION"]["value"] == "eu-west-1"
            assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage:9000"


# what a pod's process reads the settings from (`StorageSettings.from_env`), and who may carry a secret
SECRET_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _all_containers(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, _, spec in pod_specs(objects):
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            yield f"{name}/{c['name']}", c


def test_storage_settings_reach_every_service_and_executor_as_aws_variables() -> None:
    from lsmlake.fs import StorageSettings

    objects = render("s3-all-settings")
    containers = dict(_all_containers(objects))
    assert {n.split("/")[0] for n in containers} == {f"{RELEASE}-lsmlake-{c}" for c in
                                                     ("catalog", "writer", "compactor")} | {"spark-executor"}
    for name, c in containers.items():
        env = env_of(c)
        # what the process makes of its environment: the library's own reading of it
        assert StorageSettings.from_env(container_env(c)) == StorageSettings(
            "http://minio.storage:9000", "eu-west-1", "from-a-secret", "from-a-secret", "from-a-secret", True), name
        refs = {v: env[v]["valueFrom"]["secretKeyRef"] for v in SECRET_VARS}
        assert refs == {"AWS_ACCESS_KEY_ID": {"name": "lake-s3", "key": "id"},
                        "AWS_SECRET_ACCESS_KEY": {"name": "lake-s3", "key": "key"},
                        "AWS_SESSION_TOKEN": {"name": "lake-s3", "key": "token"}}, name
    assert not of_kind(objects, "Secret"), "an existing Secret is referenced, never copied"


def test_workload_identity_gives_no_keys_and_annotates_the_account() -> None:
    from lsmlake.fs import StorageSettings

    objects = render("s3-workload-identity")
    for name, c in _all_containers(objects):
        env = env_of(c)
        assert not set(SECRET_VARS) & set(env), name
        settings = StorageSettings.from_env(container_env(c))
        assert settings == StorageSettings(region="eu-west-1", path_style=False), name
        assert not settings.has_credentials()  # the AWS default chain: the web identity of the account
    accounts = {a["metadata"]["name"]: a for a in of_kind(objects, "ServiceAccount")}
    for a in accounts.values():
        assert a["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == "arn:aws:iam::123456789012:role/lake"
    executor_account = spark_conf(_container(objects, "compactor"))[
        "spark.kubernetes.authenticate.executor.serviceAccountName"]
    assert executor_account in accounts


@pytest.mark.parametrize("value_set", VALUE_SET_NAMES)
def test_no_secret_value_is_inlined(value_set: str) -> None:
    """Keys reach a container only through `secretKeyRef`; values of a chart-made Secret appear only in it."""
    objects = render(value_set)
    for name, c in _all_containers(objects):
        for var in SECRET_VARS:
            entry = env_of(c).get(var)
            if entry is not None:
                assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], f"{name}: {var}"
        assert not any("@" in a.split("?", 1)[0] and "s3://" in a for a in c.get("args", [])), name
    created = VALUE_SETS[value_set].get("warehouse", {}).get("s3", {}).get("credentials", {})
    for secret_value in (created.get("accessKeyId"), created.get("secretAccessKey")):
        if secret_value:
            holders = [o["metadata"]["name"] for o in objects if secret_value in json.dumps(o)]
            assert holders == [f"{RELEASE}-lsmlake-s3"], holders


@pytest.mark.parametrize(("values", "message"), [
    ({"warehouse": {"s3": {"pathStyle": "maybe"}}}, "warehouse.s3.pathStyle = maybe"),
    ({"warehouse": {"uri": "s3://AKIA:secret@bucket/wh"}}, "warehouse.uri holds credentials"),
    ({"warehouse": {"s3": {"credentials": {"accessKeyId": "a", "secretAccessKey": "b", "sessionTokenKey": "t"}}}},
     "sessionTokenKey needs existingSecret"),
])
def test_storage_values_that_cannot_work_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        _chart().render(values=values, name=RELEASE, namespace=NAMESPACE)


def test_a_warehouse_uri_with_a_query_but_no_credentials_is_kept() -> None:
    objects = _chart().render(values={"warehouse": {"uri": "s3://bucket/wh?region=eu-west-1"}}, name=RELEASE,
                              namespace=NAMESPACE)
    docs = [d for path, text in objects.items() if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]
    c = _container(docs, "writer")
    assert flag(c, "--warehouse") == "s3://bucket/wh?region=eu-west-1"


def test_spark_on_kubernetes() -> None:
    objects = render("spark-on-kubernetes")
    deployment = named(objects, "Deployment", f"{RELEASE}-lsmlake-compactor")
    pod = deployment["spec"]["template"]["spec"]
    c = _container(objects, "compactor")
    assert flag(c, "--spark-master") == "k8s://https://kubernetes.default.svc"
    conf = spark_conf(c)
    assert conf["spark.kubernetes.container.image"] == "lsmlake:0.1.0"
    assert conf["spark.kubernetes.container.image.pullSecrets"] == "registry,mirror"
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == pod["serviceAccountName"]
    assert pod["automountServiceAccountToken"] is True
    assert conf["spark.executor.instances"] == "4"
    assert conf["spark.executor.cores"] == "2"
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.executor.memoryOverhead"] == "4g"
    assert conf["spark.kubernetes.executor.limit.cores"] == "2"
    assert conf["spark.task.maxFailures"] == "4"  # compactor.spark.conf
    # the driver advertises its pod IP, from the downward API
    env = env_of(c)
    assert conf["spark.driver.host"] == "$(POD_IP)"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert conf["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # the headless Service of the drivers names the ports Spark is told to use
    driver = named(objects, "Service", f"{RELEASE}-lsmlake-compactor-driver")
    assert driver["spec"]["clusterIP"] == "None"
    assert matches(driver["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    container_ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    service_ports = {p["name"]: p for p in driver["spec"]["ports"]}
    assert service_ports["spark-driver"]["port"] == int(conf["spark.driver.port"]) == container_ports["spark-driver"]
    assert (service_ports["spark-blockmgr"]["port"] == int(conf["spark.driver.blockManager.port"])
            == container_ports["spark-blockmgr"])
    # the executor pod template is mounted where Spark is told to read it
    template_file = Path(conf["spark.kubernetes.executor.podTemplateFile"])
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(template_file.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    configmap = named(objects, "ConfigMap", volume["configMap"]["name"])
    template = yaml.safe_load(configmap["data"][template_file.name])
    assert template["spec"]["containers"][0]["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    assert template["spec"]["nodeSelector"] == {"pool": "spark"}
    assert template["spec"]["imagePullSecrets"] == [{"name": "registry"}, {"name": "mirror"}]
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "spark-executor"
    # executors run as the workload account (S3 access), without API rights
    executor_account = conf["spark.kubernetes.authenticate.executor.serviceAccountName"]
    named(objects, "ServiceAccount", executor_account)
    assert executor_account != pod["serviceAccountName"]
    # RBAC: the driver's account may manage executor pods and their services, config maps and claims
    [binding] = of_kind(objects, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    role = named(objects, "Role", binding["roleRef"]["name"])
    granted = {(res, verb) for rule in role["rules"] if rule["apiGroups"] == [""]
               for res in rule["resources"] for verb in rule["verbs"]}
    for res in ("pods", "services", "configmaps", "persistentvolumeclaims"):
        for verb in ("create", "delete", "watch", "get", "list"):
            assert (res, verb) in granted, (res, verb)
    # executors may reach their driver, and the driver its executors
    policy = named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-compactor")
    executor_rule = policy["spec"]["ingress"][-1]
    assert executor_rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "spark-executor"
    assert {p["port"] for p in executor_rule["ports"]} == {7078, 7079}
    named(objects, "NetworkPolicy", f"{RELEASE}-lsmlake-spark-executor")


def test_writer_replicas_without_the_autoscaler() -> None:
    objects = render("hpa-off")
    assert not of_kind(objects, "HorizontalPodAutoscaler")
    assert named(objects, "Deployment", f"{RELEASE}-lsmlake-writer")["spec"]["replicas"] == 3
    flags = parse_flags(_container(objects, "writer")["args"])
    assert flags["--ingest"] == ["shop.orders:debezium", "shop.clicks"]


def test_network_policies_can_be_left_out() -> None:
    assert not of_kind(render("network-policies-off"), "NetworkPolicy")


def test_restricted_egress_keeps_dns_the_release_and_the_extra_rules() -> None:
    objects = render("egress-restricted")
    policies = of_kind(objects, "NetworkPolicy")
    assert len(policies) == 4
    for p in policies:
        assert p["spec"]["policyTypes"] == ["Ingress", "Egress"]
        egress = p["spec"]["egress"]
        assert {"port": 53, "protocol": "UDP"} in egress[0]["ports"]
        assert egress[1]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE
        assert egress[2]["ports"] == [{"port": 443, "protocol": "TCP"}]


def test_three_compactors_share_the_buckets() -> None:
    objects = render("three-compactors")
    assert named(objects, "Deployment", f"{RELEASE}-lsmlake-compactor")["spec"]["replicas"] == 3
    # each replica names itself on the timeline after its pod
    assert flag(_container(objects, "compactor"), "--compactor-id") == "$(POD_NAME)"


def test_file_warehouse_mounts_the_shared_claim() -> None:
    objects = render("file-warehouse-no-metrics")
    for name, _, spec in pod_specs(objects):
        claims = [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v]
        assert "lake-rwx" in claims, name
        assert "/data/warehouse" in {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}


# ---------------------------------------------------------------------------------------------------
# values.yaml and the image


def test_every_value_is_documented() -> None:
    """Each key of values.yaml has a comment right above it, or sits inside a commented block."""
    undocumented = []
    documented_at: list[tuple[int, bool]] = []  # (indent, documented) of the enclosing keys
    previous = ""
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("- "):
            previous = stripped if stripped.startswith("#") else previous
            continue
        if stripped.startswith("#"):
            previous = stripped
            continue
        indent = len(line) - len(line.lstrip())
        while documented_at and documented_at[-1][0] >= indent:
            documented_at.pop()
        key = stripped.split(":", 1)[0]
        documented = previous.startswith("#") or any(d for _, d in documented_at)
        if not documented:
            undocumented.append(key)
        documented_at.append((indent, previous.startswith("#")))
        previous = stripped
    # parents are documented by their children; leaves must carry a comment of their own or a parent's
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    leaves_missing = [k for k in undocumented if not isinstance(_find(values, k), dict)]
    assert not leaves_missing, f"undocumented values: {leaves_missing}"


def _find(tree: Any, key: str) -> Any:
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        for v in tree.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def dockerfile() -> str:
    return DOCKERFILE.read_text()


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined; heredoc bodies skipped."""
    out: list[tuple[str, str]] = []
    lines = iter(dockerfile().splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest))
        heredoc = re.search(r"<<-?'?(\w+)'?", rest)
        if heredoc:
            for body in lines:
                if body == heredoc.group(1):
                    break
    return out


def test_dockerfile_image() -> None:
    instructions = _instructions()
    args = dict(a.split("=", 1) for w, a in instructions if w == "ARG" and "=" in a)
    bases = [a.split()[0] for w, a in instructions if w == "FROM"]
    resolved = [args.get(b.strip("${}"), b) for b in bases]
    assert resolved and all(b.startswith("python:3.11-slim") for b in resolved), resolved
    runs = " ".join(a for w, a in instructions if w == "RUN")
    assert "openjdk-17-jre-headless" in runs
    assert "scripts/gen_proto.py" in runs and "pip install ." in runs
    assert runs.index("scripts/gen_proto.py") < runs.index("pip install .")
    assert "--uid 10001" in runs
    users = [a for w, a in instructions if w == "USER"]
    assert users and users[-1].split(":")[0] == "10001"
    assert not [a for w, a in instructions if w == "ENTRYPOINT"], "the chart chooses the command"


def test_dockerfile_installs_the_commands_the_chart_runs() -> None:
    """The image's smoke check runs each console script; each is in pyproject.toml, and every command
    the chart runs is among them."""
    smoke = next(a for w, a in _instructions() if w == "RUN" and "catalog-svc --help" in a)
    commands = {m.group(1) for m in re.finditer(r"(?:^|&&)\s*([\w-]+) --help", smoke)}
    assert commands == {"catalog-svc", "writer-svc", "compactor-svc", "lake"}
    assert commands <= set(console_scripts())
    chart_commands = {c["command"][0] for value_set in VALUE_SET_NAMES
                      for _, c in workload_containers(render(value_set))}
    assert chart_commands <= commands
    # Spark starts executor pods from the same image with the argument `executor`
    assert "/usr/local/bin/executor" in dockerfile() and "command -v executor" in smoke


def test_dockerignore_keeps_generated_code_out() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "shared/lsmlake/proto_gen/" in lines
    for needed in ("pyproject.toml", "proto/", "scripts/", "shared/"):
        assert f"!{needed}" in lines


def test_tls_and_tokens_reach_every_service_from_their_secrets(tmp_path: Path) -> None:
    values = VALUE_SETS["mutual-tls-kafka-sasl-ssl"]
    objects = render("mutual-tls-kafka-sasl-ssl")
    for deployment, c in workload_containers(objects):
        command = c["command"][0]
        root = tmp_path / command
        mount_secrets(deployment["spec"]["template"]["spec"], c, root)
        raw = container_env(c)
        env = {k: str(root) + v if v.startswith("/etc/lsmlake/") else v for k, v in raw.items()}
        s = service_settings_class(command).from_args([expand(a, env) for a in c["args"]], env=env)
        assert s.security.tls_cert == f"{root}/etc/lsmlake/tls/tls.crt"
        assert s.security.tls_client_ca == f"{root}/etc/lsmlake/tls/ca.crt"  # mutual TLS
        assert s.security.auth_tokens == f"{root}/etc/lsmlake/auth/t.json"
        assert s.health_port == values["security"]["tls"]["healthPort"]
        assert s.kafka_security.kwargs() == {
            "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "lake",
            "sasl_plain_password": "from-a-secret", "ssl_check_hostname": True,
            "ssl_cafile": f"{root}/etc/lsmlake/kafka-tls/ca.crt"}
        assert env_of(c)["LSMLAKE_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "lake-kafka", "key": "password"}
        if command == "catalog-svc":
            assert "LSMLAKE_CATALOG_TOKEN_FILE" not in raw
            continue
        # the writers and compactors call the catalog over TLS with their own certificate and token
        assert s.catalog_security.tls_ca == f"{root}/etc/lsmlake/tls/ca.crt"
        assert s.catalog_security.tls_cert == f"{root}/etc/lsmlake/tls/tls.crt"
        assert s.catalog_security.token == "a-service-token-of-role-writer"
        [tokens] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "service-tokens"]
        component = command.removesuffix("-svc")
        assert tokens["secret"]["items"] == [{"key": component, "path": component}]


def test_without_security_values_nothing_is_mounted_or_set() -> None:
    for _, c in workload_containers(render("default")):
        assert not [e for e in env_of(c) if "TLS" in e or "TOKEN" in e or "KAFKA_S" in e], c["name"]
        assert not [m for m in c["volumeMounts"] if m["mountPath"].startswith("/etc/lsmlake")]


def test_tokens_without_the_services_own_tokens_are_refused() -> None:
    with pytest.raises(Exception, match="serviceTokensSecret"):
        _chart().render(values={"security": {"auth": {"tokensSecret": "t"}}}, name=RELEASE, namespace=NAMESPACE,
                        is_install=True)


def _exposed_metrics() -> dict[str, set[str]]:
    """Every sample name the three services expose (counters with _total, histograms with _bucket...) and its
    label names, from the services' own metric registries."""
    from catalog_svc.metrics import CatalogMetrics
    from compactor_svc.metrics import CompactorMetrics
    from writer_svc.metrics import WriterMetrics

    names: dict[str, set[str]] = {}
    for metrics in (CatalogMetrics(), WriterMetrics(), CompactorMetrics()):
        for family in metrics.registry.collect():
            labels = set(getattr(metrics.registry._names_to_collectors.get(family.name), "_labelnames", ()))
            for suffix in {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",)):
                names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return names


def test_the_grafana_dashboard_ships_and_queries_only_metrics_that_exist() -> None:
    (cm,) = [o for o in of_kind(render("default"), "ConfigMap") if "lsmlake.json" in o.get("data", {})]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["lsmlake.json"])
    exposed = _exposed_metrics()
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    for expr in exprs:
        used = set(re.findall(r"\b(lsmlake_[a-z0-9_]+)\b", expr))
        assert used, expr
        for name in used:
            assert name in exposed, f"{name} is not a metric the services expose: {expr}"
        for group in re.findall(r"\bby \(([^)]*)\)", expr):
            for label in (x.strip() for x in group.split(",")):
                assert label in {"pod", "namespace"} or any(label in exposed[n] for n in used), (label, expr)
    assert {"lsmlake_table_compaction_lag_seconds", "lsmlake_table_health_score", "lsmlake_table_stalled"} <= {
        n for e in exprs for n in re.findall(r"lsmlake_[a-z0-9_]+", e)}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_grafana_dashboard_can_be_left_out() -> None:
    values = {**VALUE_SETS["default"], "grafana": {"dashboard": {"enabled": False}}}
    manifests = _chart().render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert not any("lsmlake.json" in text for text in manifests.values())
