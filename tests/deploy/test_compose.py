"""The compose file validates against the compose-spec schema and runs every workload."""

from __future__ import annotations

import yaml

from scripts.deploy import generate, validate
from tests.deploy.conftest import FIXTURES


def test_compose_file_validates() -> None:
    findings = validate.validate_compose()
    assert findings == [], "\n".join(map(str, findings))


def test_broken_compose_fails() -> None:
    findings = validate.validate_compose(FIXTURES / "broken-compose.yaml")
    rules = {(f.rule, f.message.split(":")[0]) for f in findings}
    assert any(rule == "compose-schema" for rule, _ in rules), findings
    messages = "\n".join(map(str, findings))
    assert "service 'brief' is missing" in messages
    assert "must run as the image's non-root user" in messages


def test_compose_has_the_stack_and_every_setting() -> None:
    document = yaml.safe_load(validate.COMPOSE_FILE.read_text())
    services = document["services"]
    assert {"kafka", "postgres", "migrate", "channel-demo"} <= set(services)
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    env_file = generate.parse_env_file((validate.COMPOSE_FILE.parent / "switchboard.env").read_text())
    for workload in generate.WORKLOADS:
        service = services[workload.name]
        provided = set(env_file) | set(service["environment"])
        for name in generate.workload_env_names(workload):
            if name in generate.POD_FIELD_ENV or name in generate.MIGRATION_ONLY_SECRETS:
                continue
            setting = next(s for s in generate.all_settings() if s.name == name)
            # Optional secrets may stay unset in development (the code then uses its dev keys).
            assert name in provided or setting.secret, f"{workload.name}: {name}"
    assert (validate.COMPOSE_FILE.parent / "postgres-init.sh").exists()
