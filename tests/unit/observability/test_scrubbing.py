"""Secrets never leave the process through logs or errors (SPEC §10)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from switchboard.observability.logging import JsonFormatter
from switchboard.observability.scrubbing import REDACTED, is_secret_key, scrub, scrub_text

PLANTED = "sk-ant-api03-PLANTEDsecretVALUE1234567890"


@pytest.mark.parametrize(
    "key",
    [
        "authorization",
        "Authorization",
        "x-api-key",
        "api_key",
        "openai_api_key",
        "webhook_secret",
        "session_token",
        "password",
        "DATABASE_PASSWORD",
    ],
)
def test_secret_key_names_are_recognised(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["run_id", "org_id", "tokens_in", "keyword_regex", "monkey"])
def test_ordinary_key_names_are_kept(key: str) -> None:
    assert not is_secret_key(key)


def test_scrub_masks_nested_secret_keys_and_keeps_the_rest() -> None:
    payload = {
        "run_id": "r1",
        "headers": {"Authorization": "Bearer abc.def.ghi", "x-request-id": "q"},
        "credentials": [{"api_key": PLANTED, "last4": "7890"}],
    }
    scrubbed = scrub(payload)
    assert scrubbed["run_id"] == "r1"
    assert scrubbed["headers"] == {"Authorization": REDACTED, "x-request-id": "q"}
    assert scrubbed["credentials"] == [{"api_key": REDACTED, "last4": "7890"}]
    assert payload["credentials"][0]["api_key"] == PLANTED, "scrub must not mutate its input"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"provider said 401 for key {PLANTED}", PLANTED),
        ("connect postgresql+psycopg://app:hunter2pass@db:5432/x failed", "hunter2pass"),
        ("header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9.payload.sig"),
        ("google key AIzaSyA1234567890abcdefghijklmnop", "AIzaSyA1234567890abcdefghijklmnop"),
    ],
)
def test_scrub_text_masks_credentials_inside_free_text(text: str, secret: str) -> None:
    assert secret not in scrub_text(text)
    assert REDACTED in scrub_text(text)


def test_json_log_lines_never_carry_a_planted_key() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("runner"))
    logger = logging.getLogger("test.scrub")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("calling provider with %s", PLANTED, extra={"api_key": PLANTED, "run_id": "r-1"})
        try:
            raise RuntimeError(f"upstream rejected {PLANTED}")
        except RuntimeError:
            logger.exception("provider failed")
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert PLANTED not in output
    lines = [json.loads(line) for line in output.splitlines()]
    assert lines[0]["run_id"] == "r-1" and lines[0]["service"] == "runner" and lines[0]["level"] == "info"
    assert lines[1]["exception"]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("{'X-Api-Key': 'waha-3c1f9e'}", "waha-3c1f9e"),  # a headers dict in an exception message
        ("GET /sessions?api_key=q8Zr2x&limit=5", "q8Zr2x"),
        ("Authorization: Token 7f3a91c2", "7f3a91c2"),
        ("KAFKA_SASL_PASSWORD=hunter2 in the environment", "hunter2"),
        ('webhook_secret: "sbwh_4kP"', "sbwh_4kP"),
        ("secret=xyz;", "xyz"),
    ],
)
def test_scrub_text_masks_a_secret_named_setting_or_header_written_out(text: str, secret: str) -> None:
    """Keys with no recognisable shape (WAHA keys, webhook secrets) are found by their name."""
    scrubbed = scrub_text(text)
    assert secret not in scrubbed and REDACTED in scrubbed


@pytest.mark.parametrize(
    "text",
    ["max_tokens=1000 token_budget: 500", "tokens_in=5, password_required", "the token expired at 12:30", "run_id=abc"],
)
def test_scrub_text_keeps_settings_that_are_not_secrets(text: str) -> None:
    assert scrub_text(text) == text
