"""BYO provider credentials: sealed on receipt, never returned or logged, validated in the background,
deleted only when no published version uses them, re-encrypted by key rotation.

Provider endpoints are a fake HTTP server on 127.0.0.1 started by the test (nothing reaches the
internet). Its error bodies echo the key they were sent, as real providers partly do, to prove that
what we store and show is only the status and the error type.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from aiohttp import web
from sqlalchemy import text
from sqlalchemy.orm import Session

from services.api.app import create_app
from services.api.channels.service import open_webhook_secret, sealed_aad
from services.api.core.security import totp_code
from services.api.credentials.service import record_validation
from services.api.credentials.validation import ValidationOutcome
from services.api.settings import ApiSettings
from services.cli import main as cli_main
from switchboard.credentials import (
    CredentialUnavailable,
    ProviderSettings,
    credential_aad,
    open_credential,
)
from switchboard.crypto import DEV_KEY_ID, KeyRing, Sealed
from switchboard.db.enums import CredentialValidation, Role
from switchboard.db.models.agents import AiAgent, AiAgentVersion, AiProviderCredential
from switchboard.db.models.channels import ChannelSession
from switchboard.db.models.notifications import OrgWebhook, org_webhook_aad
from switchboard.db.models.tenancy import User
from switchboard.db.session import create_engine, set_tenant, tenant_transaction
from switchboard.observability.logging import JsonFormatter
from switchboard.rotation import rotate_encryption_keys
from switchboard.settings import EgressSettings
from tests.support.api import OrgHandle
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

ANTHROPIC_GOOD = "sk-ant-api03-good-" + "a" * 24
OPENAI_GOOD = "sk-proj-good-" + "b" * 24
GOOGLE_GOOD = "AIzaSyGood" + "c" * 29


# --------------------------------------------------------------------------- fake provider


@dataclass
class FakeProviders:
    """Anthropic (/v1/models + x-api-key), OpenAI (/v1/models + Bearer), Google (/v1beta/models + x-goog-api-key)."""

    base: str = ""
    accepted: set[str] = field(default_factory=lambda: {ANTHROPIC_GOOD, OPENAI_GOOD, GOOGLE_GOOD})
    requests: list[dict[str, Any]] = field(default_factory=list)

    def settings(self) -> ProviderSettings:
        return ProviderSettings(
            anthropic_base_url=self.base, openai_base_url=f"{self.base}/v1", google_base_url=self.base
        )

    async def models(self, request: web.Request) -> web.Response:
        self.requests.append(
            {"path": request.path, "query": request.query_string, "url": str(request.url), **dict(request.headers)}
        )
        if "x-api-key" in request.headers:
            key = request.headers["x-api-key"]
            if request.headers.get("anthropic-version") and key in self.accepted:
                return web.json_response({"data": [{"id": "claude-sonnet-4-6"}, {"id": "claude-haiku-4-5"}]})
            body = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {key}"}}
            return web.json_response(body, status=401)
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if bearer in self.accepted:
            return web.json_response({"object": "list", "data": [{"id": "gpt-5"}, {"id": "gpt-5-mini"}]})
        body = {
            "error": {
                "message": f"Incorrect API key provided: {bearer}",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
        return web.json_response(body, status=401)

    async def google_models(self, request: web.Request) -> web.Response:
        self.requests.append(
            {"path": request.path, "query": request.query_string, "url": str(request.url), **dict(request.headers)}
        )
        key = request.headers.get("x-goog-api-key", "")
        if key in self.accepted:
            return web.json_response(
                {"models": [{"name": "models/gemini-2.5-flash"}, {"name": "models/gemini-2.5-pro"}]}
            )
        body = {
            "error": {
                "code": 400,
                "message": f"API key not valid. Please pass a valid API key. ({key})",
                "status": "INVALID_ARGUMENT",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
            }
        }
        return web.json_response(body, status=400 if key else 403)


@pytest.fixture
async def fake_providers() -> AsyncIterator[FakeProviders]:
    fake = FakeProviders()
    app = web.Application()
    app.router.add_get("/v1/models", fake.models)
    app.router.add_get("/v1beta/models", fake.google_models)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    fake.base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _app_client(settings: ApiSettings, keyring: KeyRing | None = None) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        if keyring is not None:
            app.state.keyring = keyring
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
            yield http


def _settings(api_settings: ApiSettings, fake: FakeProviders) -> ApiSettings:
    # No outbox relay: nothing here publishes events, and stopping it slows every teardown.
    return api_settings.model_copy(update={"providers": fake.settings(), "outbox_relay": False})


@pytest.fixture
async def client(api_settings: ApiSettings, fake_providers: FakeProviders) -> AsyncIterator[httpx.AsyncClient]:
    """The app with provider endpoints pointing at the fake server."""
    settings = _settings(api_settings, fake_providers)
    async for http in _app_client(settings):
        yield http


# --------------------------------------------------------------------------- helpers


async def _create(client: httpx.AsyncClient, org: OrgHandle, **body: Any) -> httpx.Response:
    payload = {"provider": "anthropic", "label": f"key {uuid.uuid4().hex[:6]}", "api_key": ANTHROPIC_GOOD, **body}
    return await client.post("/api/v1/credentials", json=payload, headers=org.headers())


async def _settled(client: httpx.AsyncClient, org: OrgHandle, credential_id: str) -> dict[str, Any]:
    """The credential once its background check has recorded an outcome."""
    for _ in range(200):
        response = await client.get(f"/api/v1/credentials/{credential_id}", headers=org.headers(Role.MANAGER))
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()["data"]
        if data["validation_status"] != "pending":
            return data
        await asyncio.sleep(0.05)
    raise AssertionError("the background validation never finished")


def _row_values(stack: StackEndpoints, org_id: uuid.UUID, credential_id: str) -> dict[str, Any]:
    """Every column of the raw row (row-level security: read inside the org's transaction)."""
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with engine.connect() as conn, tenant_transaction(conn, org_id):
            row = conn.execute(
                text("SELECT * FROM ai_provider_credentials WHERE id = :id"), {"id": credential_id}
            ).one()
            return dict(row._mapping)
    finally:
        engine.dispose()


def _assert_absent(plaintext: str, *haystacks: object) -> None:
    """Neither the key, nor its bytes, nor its base64 / hex appear anywhere in ``haystacks``."""
    raw = plaintext.encode()
    forms_text = {plaintext, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(), raw.hex()}
    for value in haystacks:
        if isinstance(value, bytes | bytearray | memoryview):
            blob = bytes(value)
            assert raw not in blob and all(form.encode() not in blob for form in forms_text)
        else:
            rendered = value if isinstance(value, str) else json.dumps(value, default=str)
            assert all(form not in rendered for form in forms_text), "the key leaked"


# --------------------------------------------------------------------------- creation and validation


async def test_create_returns_only_the_safe_view_and_a_good_key_is_validated_in_the_background(
    client: httpx.AsyncClient, org: OrgHandle, fake_providers: FakeProviders, stack: StackEndpoints
) -> None:
    created = await _create(client, org, label="Production")
    assert created.status_code == 201, created.text
    data = created.json()["data"]
    assert set(data) == {
        "id", "provider", "label", "last4", "base_url", "is_default", "validation_status", "validated_at",
        "validation_error", "models_available", "created_by", "created_at", "updated_at",
    }  # fmt: skip
    assert data["last4"] == ANTHROPIC_GOOD[-4:] and data["provider"] == "anthropic" and data["label"] == "Production"
    assert data["validation_status"] == "pending"
    _assert_absent(ANTHROPIC_GOOD, created.text)

    settled = await _settled(client, org, data["id"])
    assert settled["validation_status"] == "valid"
    assert settled["validated_at"] is not None and settled["validation_error"] is None
    assert settled["models_available"] == ["claude-haiku-4-5", "claude-sonnet-4-6"]
    # The key went in the x-api-key header with the API version, never in the URL.
    sent = fake_providers.requests[-1]
    assert sent["path"] == "/v1/models" and sent["x-api-key"] == ANTHROPIC_GOOD and sent["anthropic-version"]
    assert ANTHROPIC_GOOD not in sent["url"]

    # Stored sealed: the row opens to the key with its associated data, under the dev key id.
    row = _row_values(stack, org.org_id, data["id"])
    assert row["key_id"] == DEV_KEY_ID and len(row["iv"]) == 12 and len(row["tag"]) == 16
    _assert_absent(ANTHROPIC_GOOD, *row.values())


@pytest.mark.parametrize(
    ("provider", "key", "error_type"),
    [
        ("anthropic", "sk-ant-api03-rejected-" + "x" * 20, "authentication_error"),
        ("openai", "sk-proj-rejected-" + "y" * 20, "invalid_api_key"),
        ("google", "AIzaSyRejected" + "z" * 25, "API_KEY_INVALID"),
    ],
)
async def test_a_rejected_key_gets_a_safe_validation_error(
    client: httpx.AsyncClient, org: OrgHandle, fake_providers: FakeProviders, provider: str, key: str, error_type: str
) -> None:
    created = await _create(client, org, provider=provider, api_key=key)
    assert created.status_code == 201, created.text
    settled = await _settled(client, org, created.json()["data"]["id"])
    assert settled["validation_status"] == "invalid"
    assert settled["validated_at"] is None
    error = settled["validation_error"]
    assert error.startswith(f"{provider} rejected the key (HTTP ") and error_type in error
    # The fake echoed the key in its message: we keep the type, never the message.
    _assert_absent(key, error, settled)
    sent = fake_providers.requests[-1]
    assert key not in sent["url"] and "key=" not in sent["query"]
    if provider == "google":
        assert sent["path"] == "/v1beta/models" and sent["x-goog-api-key"] == key
    if provider == "openai":
        assert sent["path"] == "/v1/models" and sent["Authorization"] == f"Bearer {key}"


async def test_an_unreachable_provider_is_an_error_not_a_rejection(client: httpx.AsyncClient, org: OrgHandle) -> None:
    created = await _create(
        client, org, provider="openai", api_key="local-key-1234", base_url=f"http://127.0.0.1:{_closed_port()}/v1"
    )
    assert created.status_code == 201, created.text
    settled = await _settled(client, org, created.json()["data"]["id"])
    assert settled["validation_status"] == "error"
    assert settled["validation_error"] == "openai: could not reach the provider (ConnectError)"


async def test_revalidate_runs_the_check_again(
    client: httpx.AsyncClient, org: OrgHandle, fake_providers: FakeProviders
) -> None:
    key = "sk-ant-api03-later-" + "q" * 20
    created = await _create(client, org, api_key=key)
    cid = created.json()["data"]["id"]
    assert (await _settled(client, org, cid))["validation_status"] == "invalid"

    fake_providers.accepted.add(key)  # e.g. the owner fixed the key's permissions at the provider
    again = await client.post(f"/api/v1/credentials/{cid}:revalidate", headers=org.headers())
    assert again.status_code == 202, again.text
    assert again.json()["data"]["validation_status"] == "pending"
    _assert_absent(key, again.text)
    settled = await _settled(client, org, cid)
    assert settled["validation_status"] == "valid" and settled["validation_error"] is None
    assert settled["validated_at"] is not None

    missing = await client.post(f"/api/v1/credentials/{uuid.uuid4()}:revalidate", headers=org.headers())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


# --------------------------------------------------------------------------- the canary


async def test_a_planted_canary_key_never_leaks(
    client: httpx.AsyncClient,
    org: OrgHandle,
    fake_providers: FakeProviders,
    stack: StackEndpoints,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Shaped like no known provider key, so no value-pattern scrubber can hide a leak: only not
    # writing it can pass. The fake server rejects it and echoes it back in its error message.
    canary = f"canary{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}"
    started = datetime.now(UTC)
    formatted = io.StringIO()
    json_handler = logging.StreamHandler(formatted)
    json_handler.setFormatter(JsonFormatter("api-test"))
    json_handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(json_handler)
    caplog.set_level(logging.DEBUG)
    bodies: list[str] = []
    try:
        created = await client.post(
            "/api/v1/credentials",
            json={"provider": "openai", "label": "Canary", "api_key": canary, "base_url": f"{fake_providers.base}/v1"},
            headers=org.headers(),
        )
        assert created.status_code == 201, created.text
        cid = created.json()["data"]["id"]
        bodies.append(created.text)
        settled = await _settled(client, org, cid)
        assert settled["validation_status"] == "invalid"
        bodies.append(json.dumps(settled))
        bodies.append((await client.get("/api/v1/credentials", headers=org.headers(Role.MANAGER))).text)
        bodies.append((await client.get(f"/api/v1/credentials/{cid}", headers=org.headers())).text)
        bodies.append((await client.post(f"/api/v1/credentials/{cid}:revalidate", headers=org.headers())).text)
        await _settled(client, org, cid)
        # Refused requests carrying the canary: the error envelope must not echo it either.
        for bad in (
            {"provider": "anthropic", "label": "Wrong shape", "api_key": canary},  # no sk-ant- prefix
            {"provider": "openai", "label": "Canary", "api_key": canary, "base_url": f"{fake_providers.base}/v1"},
            {"provider": "openai", "label": "x", "api_key": canary, "base_url": "http://8.8.8.8/v1"},
            {"provider": "openai", "label": "x", "api_key": canary, "unexpected": canary},
        ):
            refused = await client.post("/api/v1/credentials", json=bad, headers=org.headers())
            assert refused.status_code in (409, 422), refused.text
            bodies.append(refused.text)

        # Just-in-time decryption still yields it (it was stored, sealed, not lost).
        engine = create_engine(stack.database_url, pool_size=1)
        try:
            with Session(engine) as session, tenant_transaction(session, org.org_id):
                assert open_credential(session, KeyRing.from_settings(), org.org_id, uuid.UUID(cid)) == canary
        finally:
            engine.dispose()
    finally:
        root.removeHandler(json_handler)

    _assert_absent(canary, *bodies)
    # Every log record at every level, as raw records (before any formatter) and as JSON lines.
    assert caplog.records, "nothing was logged: the capture is not working"
    for record in caplog.records:
        _assert_absent(canary, record.getMessage(), repr(record.args), repr(vars(record)), record.exc_text or "")
    assert formatted.getvalue()
    _assert_absent(canary, formatted.getvalue(), caplog.text)
    # Not in any column of the row, in any encoding.
    _assert_absent(canary, *_row_values(stack, org.org_id, cid).values())
    # Not in the audit log nor in any event written meanwhile.
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with engine.connect() as conn, tenant_transaction(conn, org.org_id):
            audit = [
                dict(r._mapping)
                for r in conn.execute(text("SELECT * FROM audit_log WHERE org_id = :o"), {"o": org.org_id})
            ]
            events = list(
                conn.execute(text("SELECT key, payload, headers FROM outbox WHERE created_at >= :t"), {"t": started})
            )
    finally:
        engine.dispose()
    assert {"ai_credential.created", "ai_credential.validated", "ai_credential.revalidation_requested"} <= {
        a["action"] for a in audit
    }
    for entry in audit:
        _assert_absent(canary, *entry.values())
    for event in events:
        _assert_absent(canary, *event)


# --------------------------------------------------------------------------- delete


def _publish_version_using(stack: StackEndpoints, org_id: uuid.UUID, credential_id: str) -> uuid.UUID:
    """An agent with a published version naming the credential, written directly (as the agents API would)."""
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with Session(engine) as session, tenant_transaction(session, org_id):
            agent = AiAgent(org_id=org_id, name="Support")
            session.add(agent)
            session.flush()
            version = AiAgentVersion(
                org_id=org_id,
                agent_id=agent.id,
                version_number=1,
                system_prompt="You help.",
                provider="anthropic",
                model="claude-sonnet-4-6",
                credential_id=uuid.UUID(credential_id),
                status="published",
                published_at=datetime.now(UTC),
            )
            session.add(version)
            session.flush()
            agent.published_version_id = version.id
            return version.id
    finally:
        engine.dispose()


def _set_version_status(stack: StackEndpoints, org_id: uuid.UUID, version_id: uuid.UUID, status: str) -> None:
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with Session(engine) as session, tenant_transaction(session, org_id):
            version = session.get(AiAgentVersion, version_id)
            assert version is not None
            version.status = status
            version.superseded_at = datetime.now(UTC)
    finally:
        engine.dispose()


async def test_delete_is_refused_while_a_published_version_uses_the_credential(
    client: httpx.AsyncClient, org: OrgHandle, stack: StackEndpoints
) -> None:
    created = await _create(client, org, label="Shared", is_default=True)
    cid = created.json()["data"]["id"]
    version_id = _publish_version_using(stack, org.org_id, cid)

    refused = await client.delete(f"/api/v1/credentials/{cid}", headers=org.headers())
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "conflict" and error["details"]["reason"] == "credential_in_use"
    assert error["details"]["version_ids"] == [str(version_id)]
    assert (await client.get(f"/api/v1/credentials/{cid}", headers=org.headers())).status_code == 200

    # Once that version is superseded (it still names the credential), delete works: a tombstone.
    _set_version_status(stack, org.org_id, version_id, "superseded")
    deleted = await client.delete(f"/api/v1/credentials/{cid}", headers=org.headers())
    assert deleted.status_code == 204, deleted.text
    assert (await client.get(f"/api/v1/credentials/{cid}", headers=org.headers())).status_code == 404
    listed = (await client.get("/api/v1/credentials", headers=org.headers())).json()["data"]
    assert cid not in {c["id"] for c in listed}
    again = await client.delete(f"/api/v1/credentials/{cid}", headers=org.headers())
    assert again.status_code == 404

    row = _row_values(stack, org.org_id, cid)
    assert row["deleted_at"] is not None and not row["is_active"] and not row["is_default"]
    assert row["ciphertext"] is None and row["iv"] is None and row["tag"] is None and row["key_id"] is None
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with Session(engine) as session, tenant_transaction(session, org.org_id):
            with pytest.raises(CredentialUnavailable) as gone:
                open_credential(session, KeyRing.from_settings(), org.org_id, uuid.UUID(cid))
            assert gone.value.code == "deleted"
            actions = session.execute(
                text("SELECT action, details FROM audit_log WHERE org_id = :o AND target_id = :t ORDER BY created_at"),
                {"o": org.org_id, "t": cid},
            ).all()
    finally:
        engine.dispose()
    assert "ai_credential.deleted" in [a.action for a in actions]
    # The label is free again for a new key.
    assert (await _create(client, org, label="Shared")).status_code == 201


# --------------------------------------------------------------------------- rules


async def test_one_default_per_provider_moves_to_the_newest(client: httpx.AsyncClient, org: OrgHandle) -> None:
    first = (await _create(client, org, is_default=True)).json()["data"]
    second = (await _create(client, org, is_default=True)).json()["data"]
    other = (await _create(client, org, provider="openai", api_key=OPENAI_GOOD, is_default=True)).json()["data"]
    listed = {c["id"]: c for c in (await client.get("/api/v1/credentials", headers=org.headers())).json()["data"]}
    assert listed[first["id"]]["is_default"] is False
    assert listed[second["id"]]["is_default"] is True and listed[other["id"]]["is_default"] is True
    only_openai = await client.get("/api/v1/credentials", params={"provider": "openai"}, headers=org.headers())
    assert [c["id"] for c in only_openai.json()["data"]] == [other["id"]]


async def test_a_leaked_key_is_replaced_in_place_and_checked_again(
    client: httpx.AsyncClient, org: OrgHandle, fake_providers: FakeProviders, stack: StackEndpoints
) -> None:
    """``PATCH`` with a new ``api_key``: the same credential (every version naming it) now holds the
    new key, sealed for its row, shown by its new last four, ``pending`` until the background check
    accepts it. Neither key appears in the response or the audit entry."""
    created = (await _create(client, org, label="Production")).json()["data"]
    assert (await _settled(client, org, created["id"]))["validation_status"] == "valid"
    fresh = "sk-ant-api03-rotated-" + "r" * 24
    fake_providers.accepted.add(fresh)

    patched = await client.patch(f"/api/v1/credentials/{created['id']}", json={"api_key": fresh}, headers=org.headers())

    assert patched.status_code == 200, patched.text
    data = patched.json()["data"]
    assert (data["id"], data["last4"], data["validation_status"]) == (created["id"], fresh[-4:], "pending")
    assert data["validated_at"] is None and data["models_available"] is None
    _assert_absent(fresh, patched.text)
    _assert_absent(ANTHROPIC_GOOD, patched.text)
    settled = await _settled(client, org, created["id"])
    assert settled["validation_status"] == "valid"
    assert fake_providers.requests[-1]["x-api-key"] == fresh
    row = _row_values(stack, org.org_id, created["id"])
    sealed = Sealed(bytes(row["ciphertext"]), bytes(row["iv"]), bytes(row["tag"]), row["key_id"])
    opened = KeyRing.from_settings().open(sealed, aad=credential_aad(org.org_id, uuid.UUID(created["id"])))
    assert opened.decode() == fresh
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with engine.connect() as conn, tenant_transaction(conn, org.org_id):
            audit = conn.execute(
                text("SELECT action, details FROM audit_log WHERE target_id = :id ORDER BY created_at, id"),
                {"id": created["id"]},
            ).all()
    finally:
        engine.dispose()
    [updated] = [a.details for a in audit if a.action == "ai_credential.updated"]
    assert updated["key_replaced"]["last4_from"] == ANTHROPIC_GOOD[-4:]
    assert updated["key_replaced"]["last4_to"] == fresh[-4:]
    _assert_absent(fresh, updated)
    _assert_absent(ANTHROPIC_GOOD, updated)


async def test_the_check_of_a_key_replaced_meanwhile_is_not_recorded_for_the_new_key(
    client: httpx.AsyncClient, org: OrgHandle, stack: StackEndpoints
) -> None:
    """A check reads the key, the provider takes seconds, a PATCH replaces the key meanwhile: the
    old key's verdict must not be shown as the new key's (the new key's own check records it)."""
    created = (await _create(client, org)).json()["data"]
    await _settled(client, org, created["id"])
    old_iv = bytes(_row_values(stack, org.org_id, created["id"])["iv"])
    fresh = "sk-ant-api03-rotated-" + "s" * 24  # the fake provider rejects it: its check says invalid
    assert (
        await client.patch(f"/api/v1/credentials/{created['id']}", json={"api_key": fresh}, headers=org.headers())
    ).status_code == 200
    assert (await _settled(client, org, created["id"]))["validation_status"] == "invalid"

    late = ValidationOutcome(CredentialValidation.VALID, models=["claude-haiku-4-5"])
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            set_tenant(session, org.org_id)
            record_validation(
                session, org_id=org.org_id, credential_id=uuid.UUID(created["id"]), outcome=late, probed_iv=old_iv
            )
    finally:
        engine.dispose()
    after = (await client.get(f"/api/v1/credentials/{created['id']}", headers=org.headers())).json()["data"]
    assert (after["validation_status"], after["models_available"]) == ("invalid", None)


async def test_update_renames_moves_the_default_and_refuses_what_does_not_fit(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    first = (await _create(client, org, label="Old", is_default=True)).json()["data"]
    second = (await _create(client, org, label="New")).json()["data"]
    path = f"/api/v1/credentials/{second['id']}"

    promoted = await client.patch(path, json={"is_default": True, "label": "Main"}, headers=org.headers())
    assert promoted.status_code == 200, promoted.text
    assert (promoted.json()["data"]["is_default"], promoted.json()["data"]["label"]) == (True, "Main")
    listed = {c["id"]: c for c in (await client.get("/api/v1/credentials", headers=org.headers())).json()["data"]}
    assert listed[first["id"]]["is_default"] is False
    assert promoted.json()["data"]["validation_status"] != "pending", "no new key: nothing to check again"

    taken = await client.patch(path, json={"label": "Old"}, headers=org.headers())
    assert taken.status_code == 409 and taken.json()["error"]["details"]["reason"] == "label_taken"
    google_key = "AIzaSyNotAnthropic" + "g" * 20
    mismatch = await client.patch(path, json={"api_key": google_key}, headers=org.headers())
    assert mismatch.status_code == 422 and mismatch.json()["error"]["code"] == "credential_key_mismatch"
    _assert_absent(google_key, mismatch.text)
    for body in ({"api_key": None}, {"is_default": None}, {"base_url": "http://127.0.0.1:1/v1"}, {"api_key": "short"}):
        refused = await client.patch(path, json=body, headers=org.headers())
        assert refused.status_code == 422, (body, refused.text)
    manager = await client.patch(path, json={"label": "Mine"}, headers=org.headers(Role.MANAGER))
    assert manager.status_code == 403
    missing = await client.patch(f"/api/v1/credentials/{uuid.uuid4()}", json={"label": "X"}, headers=org.headers())
    assert missing.status_code == 404


async def test_labels_are_unique_per_provider(client: httpx.AsyncClient, org: OrgHandle) -> None:
    assert (await _create(client, org, label="Prod")).status_code == 201
    duplicate = await _create(client, org, label="Prod")
    assert duplicate.status_code == 409 and duplicate.json()["error"]["details"]["reason"] == "label_taken"
    assert (await _create(client, org, label="Prod", provider="openai", api_key=OPENAI_GOOD)).status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        {"provider": "anthropic", "api_key": "sk-proj-looks-like-openai-key"},  # wrong provider's key
        {"provider": "demo", "api_key": "whatever-key-123"},  # the demo model takes no key
        {"provider": "openai", "api_key": "short"},
        {"provider": "openai", "api_key": "sk-with spaces inside"},
        {"provider": "openai", "api_key": "sk-local-1234", "base_url": "http://api.example.com/v1"},  # http, public
        {"provider": "openai", "api_key": "sk-local-1234", "base_url": "http://169.254.169.254/v1"},  # metadata
        {"provider": "openai", "api_key": "sk-local-1234", "base_url": "https://user:pw@example.com/v1"},
        {"provider": "openai", "api_key": "sk-local-1234", "base_url": "ftp://example.com"},
        {"provider": "openai", "api_key": "sk-local-1234", "base_url": "https://example.com/v1?key=x"},
        {"provider": "openai", "label": "", "api_key": "sk-local-1234"},
    ],
)
async def test_invalid_bodies_are_422(client: httpx.AsyncClient, org: OrgHandle, body: dict[str, Any]) -> None:
    response = await client.post("/api/v1/credentials", json={"label": "x", **body}, headers=org.headers())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    if len(body["api_key"]) >= 8:
        _assert_absent(body["api_key"], response.text)


async def test_local_servers_may_use_plain_http(client: httpx.AsyncClient, org: OrgHandle) -> None:
    for url in (
        "http://localhost:11434/v1",
        "http://ollama:11434/v1",
        "http://10.0.0.5/v1",
        "https://proxy.example.com",
    ):
        response = await _create(client, org, provider="openai", api_key="any-local-key", base_url=url)
        assert response.status_code == 201, (url, response.text)
        assert response.json()["data"]["base_url"] == url


async def test_roles(client: httpx.AsyncClient, org: OrgHandle) -> None:
    cid = (await _create(client, org)).json()["data"]["id"]
    viewer, manager = org.headers(Role.VIEWER), org.headers(Role.MANAGER)
    admin_no_mfa = org.headers(Role.ADMIN, mfa=False)

    for path in ("/api/v1/credentials", f"/api/v1/credentials/{cid}"):
        refused = await client.get(path, headers=viewer)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
        assert (await client.get(path, headers=manager)).status_code == 200
        assert (await client.get(path, headers=admin_no_mfa)).status_code == 200

    body = {"provider": "anthropic", "label": "m", "api_key": ANTHROPIC_GOOD}
    # Revalidating is a manager's [004 §7]: it changes no secret (test_revalidate_runs_the_check_again).
    assert (await client.post(f"/api/v1/credentials/{cid}:revalidate", headers=viewer)).status_code == 403
    assert (await client.post(f"/api/v1/credentials/{cid}:revalidate", headers=manager)).status_code == 202
    writes = (
        ("POST", "/api/v1/credentials", body),
        ("DELETE", f"/api/v1/credentials/{cid}", None),
    )
    for method, path, payload in writes:
        as_manager = await client.request(method, path, json=payload, headers=manager)
        assert as_manager.status_code == 403 and as_manager.json()["error"]["code"] == "forbidden", path
        as_admin = await client.request(method, path, json=payload, headers=admin_no_mfa)
        assert as_admin.status_code == 403 and as_admin.json()["error"]["code"] == "mfa_required", path
        anonymous = await client.request(method, path, json=payload)
        assert anonymous.status_code == 401, path
    assert (await client.get(f"/api/v1/credentials/{cid}", headers=manager)).status_code == 200  # untouched


async def test_another_orgs_credential_is_404(
    client: httpx.AsyncClient, org: OrgHandle, make_org: Callable[..., OrgHandle]
) -> None:
    cid = (await _create(client, org)).json()["data"]["id"]
    other = make_org()
    for method, path in (
        ("GET", f"/api/v1/credentials/{cid}"),
        ("POST", f"/api/v1/credentials/{cid}:revalidate"),
        ("DELETE", f"/api/v1/credentials/{cid}"),
    ):
        response = await client.request(method, path, headers=other.headers())
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", path
    assert (await client.get("/api/v1/credentials", headers=other.headers())).json()["data"] == []
    assert (await client.get(f"/api/v1/credentials/{cid}", headers=org.headers())).status_code == 200


# --------------------------------------------------------------------------- key rotation


def _seal_channel_session(stack: StackEndpoints, org_id: uuid.UUID, keyring: KeyRing) -> uuid.UUID:
    """A channel session whose webhook secret is sealed exactly as the channels domain seals it."""
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with Session(engine) as session, tenant_transaction(session, org_id):
            row = ChannelSession(org_id=org_id, external_session=f"rot-{uuid.uuid4().hex[:10]}", label="Rotation")
            session.add(row)
            session.flush()
            sealed = keyring.seal(b"sbwh_rotation-secret", aad=sealed_aad("webhook_secret", org_id, row.id))
            row.webhook_secret_ciphertext, row.webhook_secret_iv = sealed.ciphertext, sealed.iv
            row.webhook_secret_tag, row.webhook_secret_key_id = sealed.tag, sealed.key_id
            return row.id
    finally:
        engine.dispose()


def _seal_org_webhook(stack: StackEndpoints, org_id: uuid.UUID, keyring: KeyRing) -> uuid.UUID:
    """The org's outgoing webhook with its signing secret sealed as the org-webhook domain seals it."""
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with Session(engine) as session, tenant_transaction(session, org_id):
            row = OrgWebhook(org_id=org_id, url="https://hooks.example.com/switchboard")
            row.id = uuid.uuid4()
            sealed = keyring.seal(b"whsec_rotation", aad=org_webhook_aad(org_id, row.id))
            row.secret_ciphertext, row.secret_iv = sealed.ciphertext, sealed.iv
            row.secret_tag, row.secret_key_id = sealed.tag, sealed.key_id
            session.add(row)
            return row.id
    finally:
        engine.dispose()


async def _enroll_totp(client: httpx.AsyncClient, email: str, password: str) -> bytes:
    login = await client.post("/api/v1/auth/login", json={"email": email, "password": password})
    auth = {"Authorization": f"Bearer {login.json()['data']['token']}"}
    enrollment = (await client.post("/api/v1/auth/mfa/totp", headers=auth)).json()["data"]
    b32 = enrollment["secret"]
    secret = base64.b32decode(b32 + "=" * (-len(b32) % 8))
    confirmed = await client.post("/api/v1/auth/mfa/totp:confirm", json={"code": totp_code(secret)}, headers=auth)
    assert confirmed.status_code == 204, confirmed.text
    return secret


async def test_rotation_reencrypts_under_the_new_key_while_reads_keep_working(
    client: httpx.AsyncClient,
    make_org: Callable[..., OrgHandle],
    stack: StackEndpoints,
    api_settings: ApiSettings,
    fake_providers: FakeProviders,
) -> None:
    email, password = f"rot-{uuid.uuid4().hex[:8]}@example.com", "rotation passphrase"
    org = make_org(email=email, password=password)
    old_ring = KeyRing.from_settings()  # what the app sealed with (the development key here)
    credential_ids = [(await _create(client, org)).json()["data"]["id"] for _ in range(3)]
    totp_secret = await _enroll_totp(client, email, password)
    channel_id = _seal_channel_session(stack, org.org_id, old_ring)
    webhook_id = _seal_org_webhook(stack, org.org_id, old_ring)

    new_key = os.urandom(32)
    new_id = f"k-{uuid.uuid4().hex[:8]}"
    ring = old_ring.with_primary(new_id, new_key)
    only_new = KeyRing([(new_id, new_key)])
    engine = create_engine(stack.database_url, pool_size=1)
    scope = {"org_ids": [org.org_id], "user_ids": [org.admin_user_id]}
    try:
        # Step 1 of the procedure: the new key is primary, the old one still in the ring - reads work.
        with Session(engine) as session, tenant_transaction(session, org.org_id):
            assert open_credential(session, ring, org.org_id, uuid.UUID(credential_ids[0])) == ANTHROPIC_GOOD

        dry = rotate_encryption_keys(engine, ring, dry_run=True, **scope)  # type: ignore[arg-type]
        assert dry.fields["ai_provider_credentials"].rotated == 3 and dry.failed == 0
        assert dry.fields["ai_provider_credentials"].remaining == 3  # nothing written

        # Step 2: rotate, two rows per transaction.
        report = rotate_encryption_keys(engine, ring, batch_size=2, **scope)  # type: ignore[arg-type]
        counts = report.as_dict()["fields"]
        assert counts["ai_provider_credentials"] == {"examined": 3, "rotated": 3, "failed": 0, "remaining": 0}
        assert counts["users.mfa_totp"]["rotated"] == 1 and counts["channel_sessions.webhook_secret"]["rotated"] == 1
        assert counts["org_webhooks.secret"]["rotated"] == 1
        assert report.remaining == 0 and report.failed == 0
        again = rotate_encryption_keys(engine, ring, **scope)  # type: ignore[arg-type]
        assert all(f.examined == 0 for f in again.fields.values())  # idempotent

        with Session(engine) as session, tenant_transaction(session, org.org_id):
            rows = [session.get(AiProviderCredential, uuid.UUID(cid)) for cid in credential_ids]
            assert {row.key_id for row in rows if row is not None} == {new_id}
            # Step 3 is safe: with only the new key, everything opens.
            for cid in credential_ids:
                assert open_credential(session, only_new, org.org_id, uuid.UUID(cid)) == ANTHROPIC_GOOD
            channel = session.get(ChannelSession, channel_id)
            assert channel is not None and channel.webhook_secret_key_id == new_id
            assert open_webhook_secret(only_new, channel) == b"sbwh_rotation-secret"
            user = session.get(User, org.admin_user_id)
            assert user is not None and user.mfa_totp_key_id == new_id
            hook = session.get(OrgWebhook, webhook_id)
            assert hook is not None and hook.secret_key_id == new_id
            hook_sealed = Sealed(hook.secret_ciphertext, hook.secret_iv, hook.secret_tag, hook.secret_key_id)
            assert only_new.open(hook_sealed, aad=org_webhook_aad(org.org_id, webhook_id)) == b"whsec_rotation"
            # ...and without it, nothing does.
            with pytest.raises(CredentialUnavailable) as old_only:
                open_credential(session, old_ring, org.org_id, uuid.UUID(credential_ids[0]))
            assert old_only.value.code == "undecryptable"
    finally:
        engine.dispose()

    # The whole API on the new key alone: TOTP login and background validation both decrypt.
    settings = _settings(api_settings, fake_providers)
    async for fresh in _app_client(settings, keyring=only_new):
        login = await fresh.post(
            "/api/v1/auth/login",
            # The next step's code: the enrollment used this step's, and a code is good once.
            json={"email": email, "password": password, "totp_code": totp_code(totp_secret, at=time.time() + 30)},
        )
        assert login.status_code == 201 and login.json()["data"]["mfa_verified"] is True, login.text
        assert (
            await fresh.post(f"/api/v1/credentials/{credential_ids[0]}:revalidate", headers=org.headers())
        ).is_success
        assert (await _settled(fresh, org, credential_ids[0]))["validation_status"] == "valid"
        created = await _create(fresh, org)
        assert _row_values(stack, org.org_id, created.json()["data"]["id"])["key_id"] == new_id


async def test_rotation_skips_what_it_cannot_open_and_the_cli_reports_it(
    client: httpx.AsyncClient,
    org: OrgHandle,
    stack: StackEndpoints,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = (await _create(client, org)).json()["data"]["id"]
    # A row sealed under a key nobody has any more (e.g. dropped too early).
    lost_ring = KeyRing([("lost", os.urandom(32))])
    engine = create_engine(stack.database_url, pool_size=1)
    lost_id = uuid.uuid4()
    try:
        with Session(engine) as session, tenant_transaction(session, org.org_id):
            sealed = lost_ring.seal(b"sk-ant-unrecoverable-000000", aad=credential_aad(org.org_id, lost_id))
            session.add(
                AiProviderCredential(
                    id=lost_id, org_id=org.org_id, provider="anthropic", label="lost", ciphertext=sealed.ciphertext,
                    iv=sealed.iv, tag=sealed.tag, key_id=sealed.key_id, last4="0000",
                )
            )  # fmt: skip
    finally:
        engine.dispose()

    new_key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("SWITCHBOARD_ENCRYPTION_KEYS", f"k-cli:{new_key},{DEV_KEY_ID}:{_dev_key_b64()}")
    monkeypatch.setenv("DATABASE_URL", stack.database_url)
    exit_code = cli_main(["admin", "rotate-keys", "--org", str(org.org_id), "--user", str(org.admin_user_id)])
    report = json.loads(capsys.readouterr().out)
    assert exit_code == 1  # something could not be rotated: the operator must look before dropping keys
    credentials = report["fields"]["ai_provider_credentials"]
    assert credentials["rotated"] == 1 and credentials["failed"] == 1 and credentials["remaining"] == 1
    assert report["primary_key_id"] == "k-cli"
    assert _row_values(stack, org.org_id, good)["key_id"] == "k-cli"
    assert _row_values(stack, org.org_id, str(lost_id))["key_id"] == "lost"


def _dev_key_b64() -> str:
    from switchboard import crypto

    return base64.b64encode(crypto._DEV_KEY).decode()


async def test_a_base_url_is_checked_against_the_egress_policy_when_the_key_is_validated(
    api_settings: ApiSettings, fake_providers: FakeProviders, org: OrgHandle
) -> None:
    """The name is resolved when the validation calls it: ``localhost`` passes the save-time check
    (not a literal address) and is refused at call time by an operator denying private networks,
    before any request leaves; the network the operator allows is called."""
    port = fake_providers.base.rsplit(":", 1)[1]
    base_url = f"http://localhost:{port}/v1"
    strict = _settings(api_settings, fake_providers).model_copy(update={"egress": EgressSettings(deny_private=True)})
    async for client in _app_client(strict):
        created = await _create(client, org, provider="openai", api_key=OPENAI_GOOD, base_url=base_url)
        assert created.status_code == 201, created.text
        settled = await _settled(client, org, created.json()["data"]["id"])
    assert settled["validation_status"] == "error"
    assert settled["validation_error"] == "openai: base_url refused by the egress policy (private)"
    assert fake_providers.requests == []

    allowed = strict.model_copy(
        update={"egress": EgressSettings(deny_private=True, allowed_cidrs="127.0.0.0/8,::1/128")}
    )
    async for client in _app_client(allowed):
        created = await _create(client, org, provider="openai", api_key=OPENAI_GOOD, base_url=base_url)
        settled = await _settled(client, org, created.json()["data"]["id"])
    assert settled["validation_status"] == "valid", settled
    assert len(fake_providers.requests) == 1
