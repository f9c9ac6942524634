"""Validate every deployment file offline: Kubernetes overlays, the compose file, the Dockerfile.

    python -m scripts.deploy.validate                         # everything (make deploy-check)
    python -m scripts.deploy.validate --kustomization DIR     # one kustomization (e.g. a fixture)
    python -m scripts.deploy.validate --compose FILE --dockerfile FILE

Kubernetes: each overlay is rendered with kustomize (a pinned build from
``scripts/deploy/install-kustomize.sh``, else ``kustomize`` or ``kubectl kustomize`` on the
PATH), then every object is checked against

1. its schema: the strict Kubernetes JSON schemas bundled by ``kubernetes-validate``
   (unknown fields are errors), or for custom resources the schemas in
   ``deploy/k8s/crd-schemas/``; an object with no schema at all is an error;
2. the rules we hold the manifests to (``check_policies``): pinned images, non-root,
   read-only root filesystem, resources, probes, no Secret values, references that
   resolve, the migration ordering, the NetworkPolicy shape, the partition bound of
   the stream services (replicas never above ``KAFKA_CONVERSATION_PARTITIONS``), and a
   production ConfigMap without laptop values (``check_production_config``).

Compose: the compose-spec JSON schema (vendored by ``check-jsonschema``) plus our rules;
``docker compose config`` as well where a Docker client with the compose plugin exists.
Dockerfile: the rules that matter (non-root USER, no secrets in ENV/ARG, no ADD from URLs,
pinned base, no build tools or caches in the final stage) and the ``.dockerignore``.
Nothing here touches the network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import yaml
from referencing import Registry, Resource

from scripts.deploy import generate

REPO_ROOT = generate.REPO_ROOT
K8S = REPO_ROOT / "deploy" / "k8s"
OVERLAY_DIRS = (K8S / "overlays" / "dev", K8S / "overlays" / "prod")
CRD_SCHEMAS = K8S / "crd-schemas"
COMPOSE_FILE = REPO_ROOT / "deploy" / "compose" / "compose.yaml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"

# The oldest Kubernetes we support and the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.31", "1.37")
CACHE_DIR = Path(os.environ.get("SWITCHBOARD_CACHE_DIR", Path.home() / ".cache" / "switchboard"))

# Secrets the manifests may reference; the operator creates them (docs/deploy.md "Secrets").
KNOWN_SECRETS = frozenset({*generate.SECRET_NAMES, "switchboard-pg-owner", "switchboard-pg-app"})


@cache
def secret_settings() -> frozenset[str]:
    """Env names that hold secrets: the code's secret-typed settings, and secret-looking names."""
    return frozenset(s.name for s in generate.all_settings() if s.secret)


def is_secret(name: str) -> bool:
    return name in secret_settings() or generate.is_secret_name(name)


POD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet"})


@dataclass(frozen=True, order=True)
class Finding:
    """One problem: where (file or object), which rule, what."""

    where: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: [{self.rule}] {self.message}"


class ToolMissing(RuntimeError):
    pass


# --------------------------------------------------------------------------- rendering


def kustomize_command() -> list[str]:
    """The kustomize to run: $KUSTOMIZE, the pinned cached build, kustomize, or kubectl kustomize."""
    if os.environ.get("KUSTOMIZE"):
        return [os.environ["KUSTOMIZE"], "build"]
    cached = CACHE_DIR / "bin" / "kustomize"
    if cached.is_file() and os.access(cached, os.X_OK):
        return [str(cached), "build"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    raise ToolMissing(
        "no kustomize found: run scripts/deploy/install-kustomize.sh (go install, cached in "
        f"{CACHE_DIR}/bin) or put kustomize or kubectl on the PATH"
    )


def render(kustomization: Path) -> list[dict[str, Any]]:
    """``kustomize build`` of one directory, as a list of objects."""
    command = [*kustomize_command(), str(kustomization)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed:\n{result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def object_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')}/{meta.get('name', '?')}"


# --------------------------------------------------------------------------- schemas


@cache
def _k8s_schema_dir(version: str) -> Path:
    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    path = Path(str(root)) / f"v{version}.0-local-strict"
    if not path.is_dir():
        raise ToolMissing(f"kubernetes-validate has no schemas for Kubernetes {version}")
    return path


@cache
def _k8s_registry(version: str) -> Registry:
    definitions = json.loads((_k8s_schema_dir(version) / "_definitions.json").read_text())
    return Resource.from_contents(definitions) @ Registry()


@cache
def _k8s_validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    # kubernetes-validate's file naming: apps/v1 -> apps-v1, rbac.authorization.k8s.io/v1 -> rbac-v1, v1 -> v1.
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _k8s_schema_dir(version) / f"{kind.lower()}-{group_version}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(schema, registry=_k8s_registry(version))


@cache
def _crd_registry() -> Registry:
    registry = Registry()
    for path in sorted(CRD_SCHEMAS.glob("*.json")):
        registry = Resource.from_contents(json.loads(path.read_text())) @ registry
    return registry


@cache
def _crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    path = CRD_SCHEMAS / f"{api_version.replace('/', '_')}_{kind}.json"
    if not path.is_file():
        return None
    return jsonschema.Draft202012Validator(json.loads(path.read_text()), registry=_crd_registry())


def _schema_errors(validator: jsonschema.protocols.Validator, obj: dict[str, Any]) -> Iterator[str]:
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in error.absolute_path) or "(root)"
        # anyOf/oneOf errors are vague on their own; the most specific sub-error says more.
        best = jsonschema.exceptions.best_match([error])
        yield f"{path}: {best.message}"


def check_schemas(objects: Iterable[dict[str, Any]]) -> list[Finding]:
    findings = []
    for obj in objects:
        where = object_name(obj)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            findings.append(Finding(where, "schema", "apiVersion and kind are required"))
            continue
        crd = _crd_validator(api_version, kind)
        if crd is not None:
            findings.extend(Finding(where, "schema", message) for message in _schema_errors(crd, obj))
            continue
        validators = [_k8s_validator(version, api_version, kind) for version in KUBERNETES_VERSIONS]
        if all(v is None for v in validators):
            findings.append(
                Finding(where, "schema", f"no schema for {api_version} {kind} (Kubernetes or crd-schemas/)")
            )
            continue
        for version, validator in zip(KUBERNETES_VERSIONS, validators, strict=True):
            if validator is None:
                findings.append(
                    Finding(where, "schema", f"{api_version} {kind} does not exist in Kubernetes {version}")
                )
                continue
            for message in _schema_errors(validator, obj):
                findings.append(Finding(where, "schema", f"(Kubernetes {version}) {message}"))
    return sorted(set(findings))


# --------------------------------------------------------------------------- rules


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    if kind in POD_KINDS:
        return ((spec.get("template") or {}).get("spec")) or {}
    return None


def _pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    return (((spec.get("template") or {}).get("metadata")) or {}).get("labels") or {}


def _containers(pod: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key in ("initContainers", "containers"):
        for container in pod.get(key) or []:
            yield key, container


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _config_maps(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o.get("data") or {} for o in objects if o.get("kind") == "ConfigMap"}


def switchboard_config(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The data of the rendered ``switchboard-config`` ConfigMap (its name carries a hash)."""
    for name, data in _config_maps(objects).items():
        if name == "switchboard-config" or name.startswith("switchboard-config-"):
            return data
    return {}


def _check_pod(where: str, obj: dict[str, Any], pod: dict[str, Any], findings: list[Finding]) -> None:
    pod_security = pod.get("securityContext") or {}
    for key, container in _containers(pod):
        name = f"{where} {key[:-1]} {container.get('name', '?')}"
        image = container.get("image")
        if not image:
            findings.append(Finding(name, "image", "no image"))
        elif not ("@sha256:" in image or ":" in image.rsplit("/", 1)[-1]):
            findings.append(Finding(name, "image", f"image {image!r} has no tag or digest"))
        elif image.endswith(":latest"):
            findings.append(Finding(name, "image", f"image {image!r} uses :latest"))
        security = container.get("securityContext") or {}
        if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is not True:
            findings.append(Finding(name, "non-root", "runAsNonRoot is not true (pod or container)"))
        if security.get("runAsUser", pod_security.get("runAsUser")) == 0:
            findings.append(Finding(name, "non-root", "runAsUser is 0"))
        if security.get("allowPrivilegeEscalation") is not False:
            findings.append(Finding(name, "privileges", "allowPrivilegeEscalation must be false"))
        if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
            findings.append(Finding(name, "privileges", "capabilities must drop ALL"))
        if security.get("readOnlyRootFilesystem") is not True:
            findings.append(Finding(name, "read-only-root", "readOnlyRootFilesystem must be true"))
        limits = (container.get("resources") or {}).get("limits") or {}
        requests = (container.get("resources") or {}).get("requests") or {}
        for resource in ("cpu", "memory"):
            if resource not in requests or resource not in limits:
                findings.append(Finding(name, "resources", f"{resource} request and limit are required"))
        for env in container.get("env") or []:
            if "value" in env and is_secret(env.get("name", "")):
                findings.append(Finding(name, "secrets", f"{env['name']} has a literal value: use a secretKeyRef"))
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref.get("name") not in KNOWN_SECRETS:
                findings.append(Finding(name, "secrets", f"unknown Secret {ref.get('name')!r} (docs/deploy.md)"))
        if obj.get("kind") == "Deployment" and key == "containers":
            for probe in ("livenessProbe", "readinessProbe"):
                if probe not in container:
                    findings.append(Finding(name, "probes", f"{probe} is required"))


def check_policies(objects: list[dict[str, Any]]) -> list[Finding]:
    """The rules beyond the schemas (see the module docstring)."""
    findings: list[Finding] = []
    config_maps = _config_maps(objects)
    deployments = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Deployment"}
    pod_owners = [o for o in objects if o.get("kind") in POD_KINDS]

    for obj in objects:
        where = object_name(obj)
        kind = obj.get("kind")
        if kind == "Secret":
            findings.append(Finding(where, "secrets", "Secrets are never committed: reference them by name"))
        if kind == "ConfigMap":
            for key in obj.get("data") or {}:
                if is_secret(key):
                    findings.append(Finding(where, "secrets", f"{key} looks like a secret: it belongs in a Secret"))
        pod = _pod_spec(obj)
        if pod is not None:
            _check_pod(where, obj, pod, findings)
            for _, container in _containers(pod):
                for source in container.get("envFrom") or []:
                    ref = source.get("configMapRef")
                    if ref and ref.get("name") not in config_maps and not ref.get("optional"):
                        findings.append(Finding(where, "references", f"ConfigMap {ref.get('name')!r} is not rendered"))
        if kind == "Deployment":
            spec = (obj.get("spec") or {}).get("template", {}).get("spec", {})
            if "terminationGracePeriodSeconds" not in spec:
                findings.append(Finding(where, "shutdown", "terminationGracePeriodSeconds must match the shutdown"))
            labels = _pod_labels(obj)
            if labels.get("app.kubernetes.io/part-of") == generate.APP:
                names = [c.get("name") for c in spec.get("initContainers") or []]
                if "wait-for-migrations" not in names:
                    findings.append(Finding(where, "ordering", "no wait-for-migrations init container"))
        if kind == "HorizontalPodAutoscaler":
            target = ((obj.get("spec") or {}).get("scaleTargetRef") or {}).get("name")
            if target not in deployments:
                findings.append(Finding(where, "references", f"scaleTargetRef {target!r} is not a rendered Deployment"))
        if kind in {"PodDisruptionBudget", "Service"}:
            selector = (obj.get("spec") or {}).get("selector") or {}
            if not any(_matches(selector, _pod_labels(owner)) for owner in pod_owners):
                findings.append(Finding(where, "references", "its selector matches no pod template"))
    findings.extend(check_partition_bound(objects))
    findings.extend(check_network_policies(objects))
    findings.extend(check_migration_job(objects))
    return sorted(set(findings))


def check_partition_bound(objects: list[dict[str, Any]]) -> list[Finding]:
    """Stream services never run more replicas than the conversation topics have partitions.

    For the dispatcher this is a correctness rule (it holds each conversation's single
    active run); for the other consumers of conversation-keyed topics, replicas above the
    bound would only sit idle. Checked on the HPA's maxReplicas, the Deployment's replicas,
    the rollout surge (a surge pod is one consumer more), and on the KafkaTopics.
    """
    config = switchboard_config(objects)
    findings: list[Finding] = []
    if "KAFKA_CONVERSATION_PARTITIONS" not in config:
        if any(o.get("kind") == "Deployment" for o in objects):
            findings.append(Finding("ConfigMap/switchboard-config", "partitions", "no KAFKA_CONVERSATION_PARTITIONS"))
        return findings
    partitions = int(config["KAFKA_CONVERSATION_PARTITIONS"])
    bound = {w.fullname for w in generate.WORKLOADS if w.partition_bound}
    for obj in objects:
        name = obj.get("metadata", {}).get("name")
        spec = obj.get("spec") or {}
        where = object_name(obj)
        target = (spec.get("scaleTargetRef") or {}).get("name")
        if obj.get("kind") == "HorizontalPodAutoscaler" and target in bound and int(spec["maxReplicas"]) > partitions:
            findings.append(
                Finding(where, "partitions", f"maxReplicas {spec['maxReplicas']} > {partitions} partitions")
            )
        if obj.get("kind") == "Deployment" and name in bound:
            if int(spec.get("replicas", 1)) > partitions:
                findings.append(Finding(where, "partitions", f"replicas {spec['replicas']} > {partitions} partitions"))
            if name == "switchboard-dispatcher":
                surge = ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("maxSurge")
                if surge not in (0, "0", "0%"):
                    findings.append(
                        Finding(where, "partitions", "the dispatcher's rollout must not surge (maxSurge 0)")
                    )
        if obj.get("kind") == "KafkaTopic":
            scope = (obj.get("metadata", {}).get("annotations") or {}).get("switchboard.dev/scope")
            if scope == "conversation" and spec.get("partitions") != partitions:
                findings.append(
                    Finding(where, "partitions", f"{spec.get('partitions')} partitions, the config says {partitions}")
                )
    return findings


def check_network_policies(objects: list[dict[str, Any]]) -> list[Finding]:
    """A default deny for Switchboard's pods; only the API open to any source."""
    policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    if not any(o.get("kind") == "Deployment" for o in objects):
        return []
    findings = []
    deny = [
        p
        for p in policies
        if (p["spec"].get("podSelector") or {}).get("matchLabels") == {"app.kubernetes.io/part-of": generate.APP}
        and "Ingress" in (p["spec"].get("policyTypes") or [])
        and not p["spec"].get("ingress")
    ]
    if not deny:
        findings.append(Finding("NetworkPolicy", "network", "no default-deny ingress policy for Switchboard's pods"))
    for policy in policies:
        selected = (policy["spec"].get("podSelector") or {}).get("matchLabels") or {}
        ours = generate.APP in {selected.get("app.kubernetes.io/part-of"), selected.get("app.kubernetes.io/name")}
        if not ours or selected.get("app.kubernetes.io/component") == "api":
            continue
        if any("from" not in rule for rule in policy["spec"].get("ingress") or []):
            findings.append(Finding(object_name(policy), "network", "opens pods other than the API to any source"))
    return findings


def check_migration_job(objects: list[dict[str, Any]]) -> list[Finding]:
    if not any(o.get("kind") == "Deployment" for o in objects):
        return []
    jobs = [o for o in objects if o.get("kind") == "Job" and o["metadata"]["name"] == "switchboard-migrate"]
    if not jobs:
        return [Finding("Job/switchboard-migrate", "ordering", "the migration Job is missing")]
    pod = _pod_spec(jobs[0]) or {}
    steps = [c.get("args") for _, c in _containers(pod)]
    migrates_first = bool(steps) and bool(steps[0]) and steps[0][:1] == ["migrate"] and "--downgrade" not in steps[0]
    if not migrates_first or not any(s and s[:2] == ["topics", "create"] for s in steps[1:]):
        return [Finding("Job/switchboard-migrate", "ordering", f"must run migrate, then topics create: {steps}")]
    return []


def _container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    pod = _pod_spec(obj) or {}
    return next((c for _, c in _containers(pod) if c.get("name") == name), {})


def check_workloads(objects: list[dict[str, Any]]) -> list[Finding]:
    """What the code has, the manifests have: every workload, every setting, the right secrets.

    Applies to a rendered overlay (one with Deployments): each long-running ``switchboard``
    subcommand has a Deployment running it, with a PodDisruptionBudget, and an autoscaler when
    it scales; every env setting its settings classes read is in the ConfigMap or in the
    container's env (secrets only as secretKeyRef); the owner role's URL reaches the migration
    Job only; the grace period covers the shutdown the settings allow.
    """
    deployments = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Deployment"}
    if not deployments:
        return []
    config = switchboard_config(objects)
    by_kind: dict[str, set[str]] = {}
    for item in objects:
        by_kind.setdefault(item.get("kind", ""), set()).add(item.get("metadata", {}).get("name", ""))
    findings: list[Finding] = []
    secret_names = secret_settings()
    for workload in generate.WORKLOADS:
        where = f"Deployment/{workload.fullname}"
        obj = deployments.get(workload.fullname)
        if obj is None:
            findings.append(Finding(where, "workloads", f"`switchboard {workload.name}` has no Deployment"))
            continue
        container = _container(obj, workload.name)
        if container.get("args") != [workload.name]:
            findings.append(Finding(where, "workloads", f"container {workload.name!r} must run [{workload.name!r}]"))
        env = {e.get("name"): e for e in container.get("env") or []}
        for name in generate.workload_env_names(workload):
            if name in generate.MIGRATION_ONLY_SECRETS:
                continue
            if name in secret_names:
                if name in config:
                    findings.append(Finding(where, "secrets", f"{name} is in the ConfigMap: it is a secret"))
                ref = (env.get(name, {}).get("valueFrom") or {}).get("secretKeyRef")
                if not ref:
                    findings.append(Finding(where, "settings", f"secret setting {name} has no secretKeyRef"))
            elif name not in config and name not in env:
                findings.append(Finding(where, "settings", f"setting {name} is neither in the ConfigMap nor in env"))
        for name in generate.MIGRATION_ONLY_SECRETS:
            if name in env:
                findings.append(Finding(where, "secrets", f"{name} is for the migration Job only"))
        grace = (obj["spec"]["template"]["spec"]).get("terminationGracePeriodSeconds", 0)
        try:
            needed = workload.grace_s(config)
        except (KeyError, ValueError):
            needed = generate.GRACE_FLOOR_S
        if grace < needed:
            findings.append(
                Finding(where, "shutdown", f"terminationGracePeriodSeconds {grace} < {needed} the settings allow")
            )
        if workload.fullname not in by_kind.get("PodDisruptionBudget", set()):
            findings.append(Finding(where, "workloads", "no PodDisruptionBudget"))
        if workload.max_replicas is not None and workload.fullname not in by_kind.get("HorizontalPodAutoscaler", set()):
            findings.append(Finding(where, "workloads", "no HorizontalPodAutoscaler"))
    if "switchboard-api" not in by_kind.get("Service", set()):
        findings.append(Finding("Service/switchboard-api", "workloads", "the API has no Service"))
    jobs = [o for o in objects if o.get("kind") == "Job" and o["metadata"]["name"] == "switchboard-migrate"]
    if jobs:
        migrate_env = {e.get("name") for e in _container(jobs[0], "migrate").get("env") or []}
        for name in generate.migration_secrets():
            if name not in migrate_env:
                findings.append(Finding("Job/switchboard-migrate", "secrets", f"the migrate step lacks {name}"))
    for setting in generate.all_settings():
        if not setting.secret and setting.name not in generate.POD_FIELD_ENV and setting.name not in config:
            findings.append(Finding("ConfigMap/switchboard-config", "settings", f"{setting.name} is missing"))
    return findings


def check_topics(objects: list[dict[str, Any]]) -> list[Finding]:
    """With a Strimzi Kafka in the overlay, a KafkaTopic per registered topic, shaped as the code
    would create it (``switchboard.contracts.all_topics()`` under the overlay's settings)."""
    if not any(o.get("kind") == "Kafka" for o in objects):
        return []
    config = switchboard_config(objects)
    rendered = {(o.get("spec") or {}).get("topicName"): o for o in objects if o.get("kind") == "KafkaTopic"}
    cluster = next(o["metadata"]["name"] for o in objects if o.get("kind") == "Kafka")
    findings = []
    for expected in generate.kafka_topics(config, cluster):
        topic = expected["spec"]["topicName"]
        actual = rendered.get(topic)
        if actual is None:
            findings.append(Finding(f"KafkaTopic {topic}", "topics", "registered topic has no KafkaTopic"))
            continue
        for key in ("partitions", "replicas", "config"):
            if actual["spec"].get(key) != expected["spec"][key]:
                findings.append(
                    Finding(
                        object_name(actual),
                        "topics",
                        f"{key} {actual['spec'].get(key)!r}, the registry says {expected['spec'][key]!r}",
                    )
                )
        if (actual["metadata"].get("labels") or {}).get("strimzi.io/cluster") != cluster:
            findings.append(Finding(object_name(actual), "topics", f"not labelled for the Kafka cluster {cluster!r}"))
    return findings


_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


def check_production_config(objects: list[dict[str, Any]]) -> list[Finding]:
    """A production ConfigMap holds no laptop values: the base's WAHA at 127.0.0.1 is the pod
    itself (every reply fails), an empty ``API_PUBLIC_URL`` makes ``:connect`` answer 409, and
    private egress allowed lets tenants point webhooks and base URLs into the cluster."""
    config = switchboard_config(objects)
    if config.get("SWITCHBOARD_ENV") != "production":
        return []
    where = "ConfigMap/switchboard-config"
    findings: list[Finding] = []
    if config.get("SWITCHBOARD_EGRESS_DENY_PRIVATE", "").lower() != "true":
        findings.append(Finding(where, "production", "SWITCHBOARD_EGRESS_DENY_PRIVATE must be true"))
    public = urlsplit(config.get("API_PUBLIC_URL", ""))
    if public.scheme != "https" or not public.hostname or public.hostname in _LOOPBACK_HOSTS:
        findings.append(Finding(where, "production", "API_PUBLIC_URL must be the https URL WAHA reaches the API at"))
    for name in ("API_WAHA_BASE_URL", "NOTIFIER_WAHA_BASE_URL"):
        host = urlsplit(config.get(name, "")).hostname or ""
        if host in _LOOPBACK_HOSTS or host.startswith("127.") or not host:
            findings.append(Finding(where, "production", f"{name} is the pod itself ({host or 'empty'})"))
    if config.get("API_WAHA_BASE_URL") != config.get("NOTIFIER_WAHA_BASE_URL"):
        findings.append(Finding(where, "production", "API_WAHA_BASE_URL and NOTIFIER_WAHA_BASE_URL must be one WAHA"))
    return findings


# Names reserved for documentation and tests (RFC 2606, RFC 6761): never a real endpoint.
_EXAMPLE_DOMAINS = frozenset({"example.com", "example.net", "example.org"})
_RESERVED_TLDS = frozenset({"example", "invalid", "test", "localhost"})


def _placeholder(host: str) -> bool:
    labels = host.lower().rstrip(".").split(".")
    return ".".join(labels[-2:]) in _EXAMPLE_DOMAINS or labels[-1] in _RESERVED_TLDS


def _hosts(value: str) -> list[str]:
    """The hosts a setting names: URLs and ``host:port`` lists (Kafka's bootstrap servers)."""
    hosts = []
    for item in value.split(","):
        item = item.strip()
        if item:
            hosts.append(urlsplit(item if "://" in item else f"//{item}").hostname or "")
    return hosts


def check_placeholders(objects: list[dict[str, Any]]) -> list[Finding]:
    """A production overlay about to be applied names no example endpoint: the bundled prod overlay
    carries ``*.example.com`` values and a ``registry.example.com`` image to show where yours go,
    and applied as they are every reply, webhook and broker connection would fail. Run on an
    overlay of yours (``--kustomization``), not on the bundled examples."""
    config = switchboard_config(objects)
    if config.get("SWITCHBOARD_ENV") != "production":
        return []
    findings = [
        Finding("ConfigMap/switchboard-config", "placeholder", f"{name} still names the example host {host}")
        for name, value in sorted(config.items())
        for host in _hosts(value)
        if host and _placeholder(host)
    ]
    for obj in objects:
        pod = (obj.get("spec") or {}).get("template", {}).get("spec") or {}
        for _, container in _containers(pod):
            registry = str(container.get("image", "")).split("/", 1)[0]
            if "." in registry and _placeholder(registry.split(":", 1)[0]):
                where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
                findings.append(Finding(where, "placeholder", f"image {container.get('image')} is the example"))
    return sorted(set(findings))


def validate_objects(objects: list[dict[str, Any]], *, placeholders: bool = False) -> list[Finding]:
    """Every rule; ``placeholders``: also refuse example endpoints (an overlay about to be applied)."""
    return (
        check_schemas(objects)
        + check_policies(objects)
        + sorted(set(check_workloads(objects) + check_topics(objects) + check_production_config(objects)))
        + (check_placeholders(objects) if placeholders else [])
    )


def validate_kustomization(path: Path, *, placeholders: bool = False) -> list[Finding]:
    try:
        objects = render(path)
    except RuntimeError as exc:
        return [Finding(str(path), "render", str(exc))]
    findings = validate_objects(objects, placeholders=placeholders)
    return [Finding(f"{path.name}: {f.where}", f.rule, f.message) for f in findings]


# --------------------------------------------------------------------------- compose


@cache
def compose_schema() -> dict[str, Any]:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(vendored.read_text(encoding="utf-8"))


def validate_compose(path: Path = COMPOSE_FILE) -> list[Finding]:
    where = str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        return [Finding(where, "compose-schema", f"not YAML: {exc}")]
    findings = [
        Finding(where, "compose-schema", f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}")
        for e in jsonschema.Draft7Validator(compose_schema()).iter_errors(document)
    ]
    services = (document or {}).get("services") or {}
    for workload in generate.WORKLOADS:
        service = services.get(workload.name)
        if service is None:
            findings.append(Finding(where, "compose", f"service {workload.name!r} is missing"))
            continue
        if service.get("command") != [workload.name]:
            findings.append(Finding(where, "compose", f"{workload.name}: command must be [{workload.name!r}]"))
        if (service.get("depends_on") or {}).get("migrate", {}).get("condition") != "service_completed_successfully":
            findings.append(Finding(where, "compose", f"{workload.name}: must wait for the migrate service"))
    for name, service in services.items():
        files = [*(service.get("env_file") or [])]
        files += [v.split(":")[0] for v in service.get("volumes") or [] if isinstance(v, str) and v.startswith(".")]
        for relative in files:
            if isinstance(relative, str) and not (path.parent / relative).exists():
                findings.append(Finding(where, "compose", f"{name}: {relative} does not exist"))
        if service.get("privileged"):
            findings.append(Finding(where, "compose", f"{name}: privileged"))
        if service.get("image", "").startswith("switchboard") and str(service.get("user", "0")).split(":")[0] in {
            "0",
            "root",
        }:
            findings.append(Finding(where, "compose", f"{name}: must run as the image's non-root user"))
    if "migrate" not in services:
        findings.append(Finding(where, "compose", "the one-shot migrate service is missing"))
    findings.extend(_docker_compose_config(path))
    return findings


def _docker_compose_config(path: Path) -> list[Finding]:
    """``docker compose config -q`` where the compose plugin exists (it needs no engine)."""
    if not shutil.which("docker"):
        return []
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return []
    result = subprocess.run(
        ["docker", "compose", "-f", str(path), "config", "-q"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        return [Finding(str(path), "docker-compose-config", result.stderr.strip())]
    return []


# --------------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str
    stage: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped; stage = FROM count - 1."""
    instructions: list[Instruction] = []
    stage = -1
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += stripped
        keyword, _, args = buffer.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(start, keyword, args.strip(), stage))
        buffer = ""
    return instructions


BUILD_TOOLS = re.compile(r"\b(build-essential|gcc|g\+\+|make|clang|cargo|rustc)\b")


def lint_dockerfile(path: Path = DOCKERFILE, dockerignore: Path | None = DOCKERIGNORE) -> list[Finding]:
    where = path.name
    instructions = parse_dockerfile(path.read_text(encoding="utf-8"))
    findings: list[Finding] = []
    args_defaults = {}
    froms = [i for i in instructions if i.keyword == "FROM"]
    final_stage = len(froms) - 1
    for ins in instructions:
        at = f"{where}:{ins.line}"
        if ins.keyword == "ARG" and ins.stage == -1 and "=" in ins.args:
            key, _, value = ins.args.partition("=")
            args_defaults[key.strip()] = value.strip().strip('"')
        if ins.keyword == "FROM":
            image = ins.args.split()[0]
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args_defaults.get(m.group(1), m.group(0)), image)
            stages = {f.args.split()[-1] for f in froms if " as " in f.args.lower()}
            if image not in stages and ("@sha256:" not in image and ":" not in image.rsplit("/", 1)[-1]):
                findings.append(Finding(at, "pinned-base", f"base image {image!r} has no tag or digest"))
            if image.endswith(":latest"):
                findings.append(Finding(at, "pinned-base", f"base image {image!r} uses :latest"))
        if ins.keyword == "ADD" and re.search(r"(https?://|git@|\.git\b)", ins.args):
            findings.append(Finding(at, "no-add-url", "ADD from a URL: download in a RUN with a checksum, or COPY"))
        if ins.keyword in {"ENV", "ARG"}:
            for name in re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)(?==|\s|$)", ins.args):
                if generate.is_secret_name(name.upper()):
                    findings.append(Finding(at, "no-secrets", f"{ins.keyword} {name}: secrets never go into an image"))
        if ins.keyword == "COPY" and re.search(
            r"(^|\s)(var|\.env|[^\s]*\.pem|[^\s]*credentials[^\s]*)(/|\s|$)", ins.args
        ):
            findings.append(Finding(at, "no-secrets", f"COPY of a secret-looking path: {ins.args}"))
        if ins.stage == final_stage and ins.keyword == "RUN":
            if BUILD_TOOLS.search(ins.args):
                findings.append(Finding(at, "final-stage", "build tools in the final stage: build in the builder"))
            if re.search(r"\bpip3?\b.*\binstall\b", ins.args) and "--no-cache-dir" not in ins.args:
                env_no_cache = any(
                    i.keyword == "ENV" and "PIP_NO_CACHE_DIR" in i.args and i.stage == final_stage for i in instructions
                )
                if not env_no_cache:
                    findings.append(Finding(at, "final-stage", "pip install without --no-cache-dir"))
            if "apt-get install" in ins.args and "rm -rf /var/lib/apt/lists" not in ins.args:
                findings.append(Finding(at, "final-stage", "apt-get install without removing /var/lib/apt/lists"))
    users = [i for i in instructions if i.keyword == "USER" and i.stage == final_stage]
    if not users:
        findings.append(Finding(where, "non-root", "the final stage sets no USER (it would run as root)"))
    elif users[-1].args.split(":")[0] in {"root", "0"}:
        findings.append(Finding(f"{where}:{users[-1].line}", "non-root", "the final stage runs as root"))
    if final_stage < 1:
        findings.append(Finding(where, "multi-stage", "build wheels in a builder stage, copy only the result"))
    entry = [i for i in instructions if i.keyword == "ENTRYPOINT" and i.stage == final_stage]
    if not entry or "switchboard" not in entry[-1].args:
        findings.append(Finding(where, "entrypoint", "ENTRYPOINT must be the switchboard command"))
    if dockerignore is not None:
        findings.extend(lint_dockerignore(dockerignore))
    return findings


def lint_dockerignore(path: Path) -> list[Finding]:
    """The build context must leave out local state: var/ holds database passwords."""
    if not path.exists():
        return [Finding(path.name, "dockerignore", "missing: the build context would include var/ and .venv")]
    patterns = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    if patterns[:1] == ["*"]:  # an allow-list: nothing enters unless named
        allowed = {p.lstrip("!").strip("/") for p in patterns if p.startswith("!")}
        leaks = sorted(a for a in allowed if a in {"var", ".venv", ".git", ".env"} or a.startswith("var/"))
        return [Finding(path.name, "dockerignore", f"allows {leaks}")] if leaks else []
    missing = [p for p in ("var", ".venv", ".git") if not any(x.strip("/") == p for x in patterns)]
    return [Finding(path.name, "dockerignore", f"does not exclude {missing}")] if missing else []


# --------------------------------------------------------------------------- CLI


def validate_all() -> dict[str, list[Finding]]:
    results = {str(o.relative_to(REPO_ROOT)): validate_kustomization(o) for o in OVERLAY_DIRS}
    results[str(COMPOSE_FILE.relative_to(REPO_ROOT))] = validate_compose()
    results["Dockerfile"] = lint_dockerfile()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--kustomization",
        action="append",
        type=Path,
        help="validate this kustomization only, as one about to be applied (example endpoints are refused)",
    )
    parser.add_argument("--compose", type=Path, help="validate this compose file only")
    parser.add_argument("--dockerfile", type=Path, help="lint this Dockerfile only")
    args = parser.parse_args(argv)
    if args.kustomization or args.compose or args.dockerfile:
        results = {str(k): validate_kustomization(k, placeholders=True) for k in args.kustomization or []}
        if args.compose:
            results[str(args.compose)] = validate_compose(args.compose.resolve())
        if args.dockerfile:
            results[str(args.dockerfile)] = lint_dockerfile(args.dockerfile, None)
    else:
        results = validate_all()
    failed = 0
    for target, findings in results.items():
        print(f"{'FAIL' if findings else 'ok  '} {target}")
        for finding in findings:
            print(f"     {finding}")
        failed += bool(findings)
    print(f"deploy-check: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
