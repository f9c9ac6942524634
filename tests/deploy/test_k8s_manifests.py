"""The rendered overlays validate, and they have an entry for everything the code has."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.deploy import generate, validate
from switchboard.contracts import Scope, all_topics
from tests.deploy.conftest import FIXTURES, OVERLAYS, containers, objects_of

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_passes_schemas_and_rules(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    findings = validate.validate_objects(rendered[overlay])
    assert findings == [], "\n".join(map(str, findings))


def test_broken_fixture_fails_on_every_planted_fault() -> None:
    findings = validate.validate_kustomization(FIXTURES / "broken-k8s")
    text = "\n".join(map(str, findings))
    planted = [
        ("schema", "Deployment/switchboard-notifier", "'replica' was unexpected"),
        ("schema", "Cluster/switchboard-pg", "'instances' is a required property"),
        ("schema", "KafkaTopic/run-events", "'partitions' is a required property"),
        ("image", "switchboard-brief container brief", "no image"),
        ("non-root", "switchboard-brief container brief", "runAsNonRoot"),
        ("resources", "switchboard-brief container brief", "request and limit"),
        ("probes", "switchboard-brief container brief", "livenessProbe"),
        ("secrets", "switchboard-runner container runner", "DATABASE_OWNER_URL has a literal value"),
        ("secrets", "Deployment/switchboard-runner", "for the migration Job only"),
        ("shutdown", "Deployment/switchboard-runner", "terminationGracePeriodSeconds 5"),
        ("partitions", "HorizontalPodAutoscaler/switchboard-dispatcher", "maxReplicas 9 > 6"),
        ("partitions", "Deployment/switchboard-dispatcher", "maxSurge 0"),
        ("network", "NetworkPolicy/switchboard-metrics-ingress", "other than the API"),
    ]
    for rule, where, message in planted:
        assert any(f.rule == rule and where in f.where and message in f.message for f in findings), (
            f"expected [{rule}] {where}: {message} among:\n{text}"
        )


def test_an_unknown_kind_has_no_schema_and_fails() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert [f.rule for f in validate.check_schemas([obj])] == ["schema"]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_workload_has_a_deployment_running_it(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    deployments = objects_of(rendered[overlay], "Deployment")
    for command in generate.workload_commands():
        deployment = deployments[f"switchboard-{command}"]
        main = deployment["spec"]["template"]["spec"]["containers"][0]
        assert main["args"] == [command]
        assert {"livenessProbe", "readinessProbe"} <= set(main)
        assert f"switchboard-{command}" in objects_of(rendered[overlay], "PodDisruptionBudget")


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_setting_of_the_code_reaches_the_pods(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    """Non-secret settings are in the ConfigMap every pod loads; secrets are secretKeyRefs."""
    objects = rendered[overlay]
    config = validate.switchboard_config(objects)
    deployments = objects_of(objects, "Deployment")
    referenced: set[str] = set()
    for obj in [*deployments.values(), *objects_of(objects, "Job").values()]:
        for container in containers(obj):
            assert container["envFrom"][0]["configMapRef"]["name"].startswith("switchboard-config")
            for env in container.get("env", []):
                if "secretKeyRef" in env.get("valueFrom", {}):
                    referenced.add(env["name"])
    for setting in generate.all_settings():
        if setting.secret:
            assert setting.name in referenced, f"secret {setting.name} ({setting.source}) is referenced by no pod"
            assert setting.name not in config
        elif setting.name in generate.POD_FIELD_ENV:
            continue
        else:
            assert setting.name in config, f"{setting.name} ({setting.source}) is missing from the ConfigMap"
    for name, field_path in generate.POD_FIELD_ENV.items():
        owners = [w for w in generate.WORKLOADS if name in generate.workload_env_names(w)]
        for workload in owners:
            env = {e["name"]: e for e in containers(deployments[workload.fullname])[-1]["env"]}
            assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == field_path


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_the_owner_role_reaches_the_migration_job_only(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    for deployment in objects_of(objects, "Deployment").values():
        for container in containers(deployment):
            assert "DATABASE_OWNER_URL" not in {e["name"] for e in container.get("env", [])}
    job = objects_of(objects, "Job")["switchboard-migrate"]
    migrate, topics = containers(job)
    # It waits for PostgreSQL (a fresh cluster's starts with it) rather than failing its few tries.
    assert (migrate["args"], topics["args"][:2]) == (["migrate", "--wait", "300"], ["topics", "create"])
    assert {"DATABASE_URL", "DATABASE_OWNER_URL"} <= {e["name"] for e in migrate["env"]}


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_gitops_tools_replace_the_migration_job_on_every_release(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    """A Job's pod template cannot be patched: under Argo CD or Flux the next release's image
    would be refused (or the old Job kept) unless the tool deletes and creates it again."""
    annotations = objects_of(rendered[overlay], "Job")["switchboard-migrate"]["metadata"]["annotations"]
    assert annotations["argocd.argoproj.io/hook"] == "Sync"
    assert annotations["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation"
    assert annotations["kustomize.toolkit.fluxcd.io/force"] == "enabled"


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_no_secret_value_is_rendered(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    objects = rendered[overlay]
    assert not objects_of(objects, "Secret")
    for key in validate.switchboard_config(objects):
        assert not validate.is_secret(key)


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_dispatcher_replicas_never_exceed_the_conversation_partitions(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    objects = rendered[overlay]
    partitions = int(validate.switchboard_config(objects)["KAFKA_CONVERSATION_PARTITIONS"])
    hpa = objects_of(objects, "HorizontalPodAutoscaler")["switchboard-dispatcher"]
    deployment = objects_of(objects, "Deployment")["switchboard-dispatcher"]
    assert hpa["spec"]["maxReplicas"] <= partitions
    assert deployment["spec"].get("replicas", 1) <= partitions
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    for workload in generate.WORKLOADS:
        if workload.partition_bound:
            assert (
                objects_of(objects, "HorizontalPodAutoscaler")[workload.fullname]["spec"]["maxReplicas"] <= partitions
            )


def test_every_registered_topic_has_a_kafka_topic_in_dev(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["dev"]
    config = validate.switchboard_config(objects)
    topics = {o["spec"]["topicName"]: o for o in objects_of(objects, "KafkaTopic").values()}
    prefix = config["KAFKA_TOPIC_PREFIX"]
    assert set(topics) == {prefix + topic.name for topic in all_topics()}
    for topic in all_topics():
        spec = topics[prefix + topic.name]["spec"]
        expected = (
            int(config["KAFKA_CONVERSATION_PARTITIONS"]) if topic.scope is Scope.CONVERSATION else topic.partitions
        )
        assert spec["partitions"] == expected
        assert spec["config"] == topic.config()
        assert spec["replicas"] == int(config["KAFKA_REPLICATION_FACTOR"])


def test_dev_has_the_operators_resources_and_prod_points_outside(rendered: dict[str, list[dict[str, Any]]]) -> None:
    dev, prod = rendered["dev"], rendered["prod"]
    assert objects_of(dev, "Kafka") and objects_of(dev, "KafkaNodePool") and objects_of(dev, "Cluster")
    assert not {o["kind"] for o in prod} & {"Kafka", "KafkaNodePool", "KafkaTopic", "Cluster"}
    bootstrap = validate.switchboard_config(prod)["KAFKA_BOOTSTRAP_SERVERS"]
    assert "switchboard-kafka-bootstrap" not in bootstrap
    for obj in prod:
        for container in containers(obj) if obj["kind"] in {"Deployment", "Job"} else []:
            assert ":" in container["image"] and not container["image"].endswith(":latest")


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_only_the_api_is_open_to_outside(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    policies = objects_of(rendered[overlay], "NetworkPolicy")
    deny = policies["switchboard-default-deny-ingress"]["spec"]
    assert deny["podSelector"]["matchLabels"] == {"app.kubernetes.io/part-of": "switchboard"}
    assert "ingress" not in deny
    open_to_all = [
        name
        for name, policy in policies.items()
        if any("from" not in rule for rule in policy["spec"].get("ingress", []))
    ]
    assert open_to_all == ["switchboard-api-ingress"]
    assert (
        policies["switchboard-api-ingress"]["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        == "api"
    )


def test_a_production_config_with_laptop_values_is_refused() -> None:
    def config(**values: str) -> list[dict[str, Any]]:
        base = {
            "SWITCHBOARD_ENV": "production",
            "SWITCHBOARD_EGRESS_DENY_PRIVATE": "true",
            "API_PUBLIC_URL": "https://sb.example.com",
            "API_WAHA_BASE_URL": "http://waha:3000",
            "NOTIFIER_WAHA_BASE_URL": "http://waha:3000",
        }
        return [{"kind": "ConfigMap", "metadata": {"name": "switchboard-config-abc"}, "data": base | values}]

    assert validate.check_production_config(config()) == []
    assert validate.check_production_config(config(SWITCHBOARD_ENV="development", API_PUBLIC_URL="")) == []
    refused = {
        "SWITCHBOARD_EGRESS_DENY_PRIVATE": ("false", "must be true"),
        "API_PUBLIC_URL": ("", "https URL"),
        "NOTIFIER_WAHA_BASE_URL": ("http://127.0.0.1:3000", "the pod itself"),
    }
    for name, (value, message) in refused.items():
        findings = validate.check_production_config(config(**{name: value}))
        assert any(message in f.message for f in findings), (name, findings)
    [different] = validate.check_production_config(config(API_WAHA_BASE_URL="http://other-waha:3000"))
    assert "one WAHA" in different.message


def test_an_overlay_about_to_be_applied_names_no_example_endpoint() -> None:
    """The bundled prod overlay shows where your values go with ``*.example.com`` hosts and a
    ``registry.example.com`` image: applied as is, every broker connection, webhook and reply
    fails. ``--kustomization`` (an overlay of yours) refuses them; the bundled examples pass."""
    prod = OVERLAYS["prod"]
    objects = validate.render(prod)
    found = {(f.where, f.message.split(" still")[0]) for f in validate.check_placeholders(objects)}
    assert ("ConfigMap/switchboard-config", "KAFKA_BOOTSTRAP_SERVERS") in found
    assert ("ConfigMap/switchboard-config", "API_PUBLIC_URL") in found
    assert any(f.startswith("Deployment/") and "registry.example.com" in m for f, m in found), found
    assert validate.main(["--kustomization", str(prod)]) == 1
    assert validate.validate_kustomization(prod) == [], "the bundled example itself passes make deploy-check"

    real = {
        "KAFKA_BOOTSTRAP_SERVERS": "kafka-0.kafka.acme.internal:9092",
        "API_PUBLIC_URL": "https://switchboard.acme.com.br",
    }
    for obj in objects:
        if obj.get("kind") == "ConfigMap" and obj["metadata"]["name"].startswith("switchboard-config"):
            obj["data"] |= real
        for container in containers(obj) if "template" in obj.get("spec", {}) else []:
            container["image"] = "registry.acme.com.br/switchboard@sha256:" + "a" * 64
    assert validate.check_placeholders(objects) == []
    assert validate.check_placeholders([{**o, "data": {"SWITCHBOARD_ENV": "development"}} for o in objects]) == []
