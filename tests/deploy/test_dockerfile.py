"""The Dockerfile keeps the rules that matter; a broken one is refused."""

from __future__ import annotations

from scripts.deploy import generate, validate
from tests.deploy.conftest import FIXTURES


def test_dockerfile_passes_the_rules() -> None:
    findings = validate.lint_dockerfile()
    assert findings == [], "\n".join(map(str, findings))


def test_broken_dockerfile_fails_each_rule() -> None:
    findings = validate.lint_dockerfile(FIXTURES / "Dockerfile.broken", FIXTURES / "dockerignore.broken")
    rules = {f.rule for f in findings}
    assert {
        "pinned-base",
        "no-add-url",
        "no-secrets",
        "final-stage",
        "non-root",
        "multi-stage",
        "entrypoint",
        "dockerignore",
    } <= rules, "\n".join(map(str, findings))


def test_image_ships_the_schemas_where_the_code_looks() -> None:
    instructions = validate.parse_dockerfile(validate.DOCKERFILE.read_text())
    final = max(i.stage for i in instructions)
    env = " ".join(i.args for i in instructions if i.keyword == "ENV" and i.stage == final)
    assert f"SWITCHBOARD_SCHEMAS_DIR={generate.SCHEMAS_DIR_IN_IMAGE}" in env
    copies = [i.args for i in instructions if i.keyword == "COPY" and i.stage == final]
    assert f"schemas {generate.SCHEMAS_DIR_IN_IMAGE}" in copies
    user = [i.args for i in instructions if i.keyword == "USER" and i.stage == final][-1]
    assert user.split(":")[0] == str(generate.UID)
    assert "requirements.lock" in " ".join(i.args for i in instructions if i.keyword == "RUN")
