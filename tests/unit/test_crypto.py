"""AES-GCM key ring, credential sealing and the pure parts of provider validation (no database)."""

from __future__ import annotations

import base64
import os
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from sqlalchemy import LargeBinary

from services.api.channels.service import sealed_aad
from services.api.credentials.schemas import CreateCredential, check_base_url
from services.api.credentials.validation import _outcome_for_status, build_request
from services.api.identity.service import _totp_aad
from switchboard.credentials import (
    CredentialUnavailable,
    OpenedCredential,
    ProviderSettings,
    credential_aad,
    last4,
    open_row,
    seal_api_key,
)
from switchboard.crypto import DEV_KEY_ID, IV_BYTES, TAG_BYTES, CryptoError, EncryptionSettings, KeyRing
from switchboard.db.base import Base
from switchboard.db.enums import CredentialValidation, LlmProvider
from switchboard.db.models.agents import AiProviderCredential
from switchboard.rotation import SEALED_FIELDS, channel_session_aad, totp_aad
from switchboard.settings import Environment, RuntimeSettings


def _ring(*ids: str) -> KeyRing:
    return KeyRing([(key_id, os.urandom(32)) for key_id in ids])


def test_seal_uses_a_fresh_12_byte_iv_and_the_primary_key_id() -> None:
    ring = _ring("k1", "k0")
    first, second = ring.seal(b"secret", aad=b"row:1"), ring.seal(b"secret", aad=b"row:1")
    assert len(first.iv) == IV_BYTES and len(first.tag) == TAG_BYTES and first.key_id == "k1"
    assert first.iv != second.iv and first.ciphertext != second.ciphertext
    assert b"secret" not in first.ciphertext
    assert ring.open(first, aad=b"row:1") == ring.open(second, aad=b"row:1") == b"secret"


def test_associated_data_binds_a_ciphertext_to_its_row() -> None:
    ring = _ring("k1")
    sealed = ring.seal(b"sk-ant-bound-to-row-1", aad=b"row:1")
    with pytest.raises(CryptoError) as exc:
        ring.open(sealed, aad=b"row:2")
    assert exc.value.code == "decrypt_failed" and "sk-ant" not in str(exc.value)
    tampered = type(sealed)(sealed.ciphertext[:-1] + bytes([sealed.ciphertext[-1] ^ 1]), sealed.iv, sealed.tag, "k1")
    with pytest.raises(CryptoError):
        ring.open(tampered, aad=b"row:1")


def test_rotation_keeps_old_values_readable_and_moves_them_to_the_new_key() -> None:
    old = _ring("k1")
    sealed = old.seal(b"value", aad=b"a")
    new_key = os.urandom(32)
    ring = old.with_primary("k2", new_key)
    assert ring.primary_id == "k2" and ring.key_ids == ("k2", "k1") and "k1" in ring and "k9" not in ring
    assert ring.open(sealed, aad=b"a") == b"value"  # reads keep working mid-rotation
    assert ring.needs_rotation(sealed) and ring.seal(b"x", aad=b"a").key_id == "k2"
    rotated = ring.rotate(sealed, aad=b"a")
    assert rotated.key_id == "k2" and not ring.needs_rotation(rotated)
    assert ring.rotate(rotated, aad=b"a") is rotated
    assert KeyRing([("k2", new_key)]).open(rotated, aad=b"a") == b"value"  # the old key can go
    with pytest.raises(CryptoError) as exc:
        old.open(rotated, aad=b"a")
    assert exc.value.code == "unknown_key_id"
    # Putting an existing id in front again does not duplicate it.
    assert ring.with_primary("k1", os.urandom(32)).key_ids == ("k1", "k2")


def test_key_ring_parsing_and_production_rules() -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    ring = KeyRing.parse(f"2026-12:{key}, 2026-01:{base64.b64encode(os.urandom(32)).decode()}")
    assert ring.key_ids == ("2026-12", "2026-01")
    for spec in ("nokey", f":{key}", "k1:not-base64!", f"k1:{base64.b64encode(b'short').decode()}", ""):
        with pytest.raises(CryptoError):
            KeyRing.parse(spec)
    production = RuntimeSettings(env=Environment.PRODUCTION)
    with pytest.raises(CryptoError) as missing:
        KeyRing.from_settings(production, EncryptionSettings(encryption_keys=None))
    assert missing.value.code == "no_keys"
    dev = KeyRing.from_settings(RuntimeSettings(env=Environment.DEVELOPMENT), EncryptionSettings(encryption_keys=None))
    assert dev.key_ids == (DEV_KEY_ID,)
    with pytest.raises(CryptoError) as dev_in_prod:
        KeyRing.from_settings(
            production,
            EncryptionSettings(encryption_keys=f"k1:{key},{DEV_KEY_ID}:{key}"),  # type: ignore[arg-type]
        )
    assert dev_in_prod.value.code == "dev_key_in_production"


# --------------------------------------------------------------------------- credentials


def _credential_row(ring: KeyRing, org_id: uuid.UUID, api_key: str) -> AiProviderCredential:
    credential_id = uuid.uuid4()
    sealed = seal_api_key(ring, org_id=org_id, credential_id=credential_id, api_key=api_key)
    return AiProviderCredential(
        id=credential_id,
        org_id=org_id,
        provider="openai",
        label="x",
        ciphertext=sealed.ciphertext,
        iv=sealed.iv,
        tag=sealed.tag,
        key_id=sealed.key_id,
        last4=last4(api_key),
    )


def test_a_credential_opens_only_in_its_own_row_and_org() -> None:
    ring, org = _ring("k1"), uuid.uuid4()
    row = _credential_row(ring, org, "sk-proj-unit-0123456789")
    assert open_row(ring, row) == "sk-proj-unit-0123456789" and row.last4 == "6789"
    assert credential_aad(org, row.id) == f"ai_provider_credentials:{org}:{row.id}".encode()

    moved = _credential_row(ring, org, "sk-proj-other")
    moved.ciphertext, moved.iv, moved.tag = row.ciphertext, row.iv, row.tag  # copied to another row
    with pytest.raises(CredentialUnavailable) as copied:
        open_row(ring, moved)
    assert copied.value.code == "undecryptable" and "sk-proj" not in str(copied.value)

    row.org_id = uuid.uuid4()  # or to another org
    with pytest.raises(CredentialUnavailable):
        open_row(ring, row)

    deleted = _credential_row(ring, org, "sk-proj-deleted-0000")
    deleted.deleted_at = datetime.now(UTC)
    deleted.ciphertext = deleted.iv = deleted.tag = None
    deleted.key_id = None
    with pytest.raises(CredentialUnavailable) as gone:
        open_row(ring, deleted)
    assert gone.value.code == "deleted"


def test_an_opened_credential_never_shows_its_key_in_repr() -> None:
    opened = OpenedCredential(uuid.uuid4(), "anthropic", None, api_key="sk-ant-repr-leak-check")
    assert "sk-ant-repr-leak-check" not in repr(opened) and "sk-ant-repr-leak-check" not in str(opened)


def test_every_sealed_column_is_rotated_with_the_associated_data_its_owner_uses() -> None:
    """A sealed column missing from SEALED_FIELDS would become unreadable once an old key is dropped."""
    sealed_groups = {
        (table.name, column.name.removesuffix("ciphertext"))
        for table in Base.metadata.tables.values()
        for column in table.columns
        if column.name.endswith("ciphertext") and isinstance(column.type, LargeBinary)
    }
    assert sealed_groups == {(f.model.__tablename__, f.prefix) for f in SEALED_FIELDS}
    org, row = uuid.uuid4(), uuid.uuid4()
    assert totp_aad(row) == _totp_aad(row)
    for field in ("webhook_secret", "api_key"):
        assert channel_session_aad(field, org, row) == sealed_aad(field, org, row)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- request bodies


def test_create_body_checks_key_shape_and_never_echoes_the_key() -> None:
    ok = CreateCredential(provider="anthropic", label=" Prod ", api_key="  sk-ant-api03-abcdefgh\n")  # type: ignore[arg-type]
    assert ok.api_key.get_secret_value() == "sk-ant-api03-abcdefgh" and ok.label == "Prod"
    assert "sk-ant" not in repr(ok)
    with pytest.raises(ValidationError) as wrong:
        CreateCredential(provider="anthropic", label="x", api_key="sk-proj-openai-key-here")  # type: ignore[arg-type]
    assert all("sk-proj-openai-key-here" not in str(e["msg"]) for e in wrong.value.errors())
    # With a base_url (a local server) any printable key is fine.
    local = CreateCredential(
        provider="openai",  # type: ignore[arg-type]
        label="x",
        api_key="ollama-local",  # type: ignore[arg-type]
        base_url="http://localhost:11434/v1/",
    )
    assert local.base_url == "http://localhost:11434/v1"


@pytest.mark.parametrize(
    ("url", "accepted"),
    [
        ("https://api.example.com/v1", True),
        ("http://localhost:8080/v1", True),
        ("http://127.0.0.1:8080", True),
        ("http://192.168.1.20/v1", True),
        ("http://llm/v1", True),
        ("http://gpu.internal/v1", True),
        ("http://api.example.com/v1", False),
        ("http://169.254.169.254/latest", False),
        ("https://[fe80::1]/v1", False),
        ("https://u:p@example.com", False),
        ("https://example.com/v1#frag", False),
        ("file:///etc/passwd", False),
        ("https://", False),
    ],
)
def test_base_url_rules(url: str, accepted: bool) -> None:
    if accepted:
        assert check_base_url(url) == url.rstrip("/")
    else:
        with pytest.raises(ValueError):
            check_base_url(url)


# --------------------------------------------------------------------------- provider validation


def test_the_key_travels_only_in_a_header() -> None:
    settings = ProviderSettings()
    for provider, header in (("anthropic", "x-api-key"), ("openai", "Authorization"), ("google", "x-goog-api-key")):
        url, headers, params = build_request(provider, settings.base_url(provider), "KEY-123456")
        assert "KEY-123456" not in url and all("KEY-123456" not in v for v in params.values())
        assert "KEY-123456" in headers[header]
    assert build_request("openai", "https://api.openai.com/v1", "k")[0] == "https://api.openai.com/v1/models"
    assert build_request("anthropic", "https://api.anthropic.com/", "k")[0] == "https://api.anthropic.com/v1/models"
    with pytest.raises(ValueError):
        build_request("demo", "http://x", "k")


def test_outcomes_keep_status_and_type_never_the_message() -> None:
    key = "sk-proj-echoed-by-provider-0123"
    echo = {"error": {"message": f"Incorrect API key provided: {key}", "type": "invalid_request_error", "code": key}}
    rejected = _outcome_for_status(LlmProvider.OPENAI, 401, echo, key)
    assert rejected.status is CredentialValidation.INVALID and rejected.error is not None
    assert key not in rejected.error and "HTTP 401" in rejected.error and "invalid_request_error" in rejected.error
    google = {"error": {"status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}], "message": key}}
    assert _outcome_for_status(LlmProvider.GOOGLE, 400, google, key).status is CredentialValidation.INVALID
    down = _outcome_for_status(LlmProvider.ANTHROPIC, 529, {"error": {"type": "overloaded_error"}}, key)
    assert down.status is CredentialValidation.ERROR and down.error == "anthropic answered HTTP 529, overloaded_error"
    assert "check base_url" in (_outcome_for_status(LlmProvider.OPENAI, 404, None, key).error or "")
    valid = _outcome_for_status(LlmProvider.GOOGLE, 200, {"models": [{"name": "models/gemini-2.5-pro"}, 7]}, key)
    assert valid.status is CredentialValidation.VALID and valid.models == ["gemini-2.5-pro"]
    weird = {"error": {"type": "<script>alert(1)</script>"}}
    assert "<script>" not in (_outcome_for_status(LlmProvider.ANTHROPIC, 500, weird, key).error or "")
