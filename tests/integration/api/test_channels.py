"""Channel sessions: the webhook secret is shown once, sealed at rest, rotatable; roles and isolation."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.channels.service import open_api_key, open_webhook_secret, sealed_aad
from services.api.settings import ApiSettings
from services.api.webhooks.service import sign
from switchboard.crypto import CryptoError, KeyRing, Sealed
from switchboard.db.enums import Role
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.channels import ChannelSession
from switchboard.db.session import create_engine, set_tenant
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


@pytest.fixture
def api_settings(api_settings: ApiSettings) -> ApiSettings:
    """No in-process outbox relay: these tests read the outbox rows themselves (the relay has its own tests)."""
    return api_settings.model_copy(update={"outbox_relay": False})


API_KEY = "waha-canary-key-5d41402abc4b2a76b9719d911017c592"


def new_session_body(**overrides: Any) -> dict[str, Any]:
    return {
        "label": "Sales line",
        "external_session": f"sales-{uuid.uuid4().hex[:10]}",
        "phone_number": "+5511912345678",
        "base_url": "http://waha.internal:3000/",
        **overrides,
    }


@pytest.fixture
def tenant_db(api_settings: ApiSettings) -> Iterator[Callable[[uuid.UUID], Session]]:
    engine = create_engine(api_settings.database.url.get_secret_value(), pool_size=1)
    opened: list[Session] = []

    def _open(org_id: uuid.UUID) -> Session:
        session = Session(engine)
        session.begin()
        set_tenant(session, org_id)
        opened.append(session)
        return session

    yield _open
    for session in opened:
        session.close()
    engine.dispose()


async def test_create_returns_the_secret_once_and_never_again(
    client: httpx.AsyncClient, org: OrgHandle, api_settings: ApiSettings, tenant_db: Callable[[uuid.UUID], Session]
) -> None:
    body = new_session_body(api_key=API_KEY)
    created = await client.post("/api/v1/channel-sessions", json=body, headers=org.headers())
    assert created.status_code == 201, created.text
    data = created.json()["data"]
    secret = data["webhook_secret"]
    assert secret.startswith("sbwh_") and len(secret) >= 40
    assert data["external_session"] == body["external_session"] and data["provider"] == "waha"
    assert data["base_url"] == "http://waha.internal:3000"  # trailing slash dropped
    assert data["status"] == "starting" and data["has_api_key"] is True and data["has_webhook_secret"] is True
    assert data["webhook"]["hmac_algorithm"] == "sha512"
    assert data["webhook"]["path"] == f"/api/v1/webhooks/waha/{data['id']}"
    assert data["webhook"]["name_routed_path"] == "/api/v1/webhooks/waha", "a free name routes by name too"
    assert API_KEY not in created.text

    listed = await client.get("/api/v1/channel-sessions", headers=org.headers(Role.MANAGER))
    shown = await client.get(f"/api/v1/channel-sessions/{data['id']}", headers=org.headers(Role.MANAGER))
    assert listed.status_code == 200 and shown.status_code == 200
    assert [s["id"] for s in listed.json()["data"]] == [data["id"]]
    for text_ in (listed.text, shown.text):
        assert secret not in text_ and API_KEY not in text_ and '"webhook_secret"' not in text_
    assert "api_key" not in shown.json()["data"]

    # At rest: sealed, bound to the row; plaintext nowhere in the row.
    session = tenant_db(org.org_id)
    row = session.scalars(select(ChannelSession).where(ChannelSession.id == uuid.UUID(data["id"]))).one()
    stored = json.dumps({c.name: repr(getattr(row, c.key)) for c in ChannelSession.__table__.columns})
    assert secret not in stored and API_KEY not in stored
    assert secret.encode() not in (row.webhook_secret_ciphertext or b"")
    keyring = KeyRing.from_settings(api_settings.runtime)
    assert open_webhook_secret(keyring, row) == secret.encode()
    assert open_api_key(keyring, row) == API_KEY
    assert row.webhook_secret_ciphertext and row.webhook_secret_iv and row.webhook_secret_tag
    assert row.webhook_secret_key_id is not None
    sealed = Sealed(
        row.webhook_secret_ciphertext, row.webhook_secret_iv, row.webhook_secret_tag, row.webhook_secret_key_id
    )
    with pytest.raises(CryptoError):  # copied to another row (or org), it does not open
        keyring.open(sealed, aad=sealed_aad("webhook_secret", row.org_id, uuid.uuid4()))

    # The audit entry says what happened, never the secrets.
    entries = session.scalars(
        select(AuditLogEntry).where(AuditLogEntry.org_id == org.org_id, AuditLogEntry.target_id == data["id"])
    ).all()
    assert [e.action for e in entries] == ["channel_session.created"]
    assert entries[0].details["api_key_stored"] is True
    assert secret not in json.dumps(entries[0].details) and API_KEY not in json.dumps(entries[0].details)


async def test_rotating_the_secret_switches_which_signature_validates(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    created = (await client.post("/api/v1/channel-sessions", json=new_session_body(), headers=org.headers())).json()
    old_secret, session_id, name = (
        created["data"]["webhook_secret"],
        created["data"]["id"],
        created["data"]["external_session"],
    )
    raw = json.dumps({"event": "session.status", "session": name, "payload": {"status": "WORKING"}}).encode()

    async def deliver(secret: str) -> int:
        response = await client.post(
            "/api/v1/webhooks/waha", content=raw, headers={"X-Webhook-Hmac": sign(secret, raw)}
        )
        return response.status_code

    assert await deliver(old_secret) == 200
    rotated = await client.post(f"/api/v1/channel-sessions/{session_id}:rotate-secret", headers=org.headers())
    assert rotated.status_code == 200, rotated.text
    new_secret = rotated.json()["data"]["webhook_secret"]
    assert new_secret != old_secret
    assert await deliver(old_secret) == 401
    assert await deliver(new_secret) == 200
    shown = (await client.get(f"/api/v1/channel-sessions/{session_id}", headers=org.headers())).json()["data"]
    assert shown["webhook_secret_rotated_at"] == rotated.json()["data"]["webhook_secret_rotated_at"]


async def test_patch_changes_only_what_is_sent_and_can_clear_the_api_key(
    client: httpx.AsyncClient, org: OrgHandle, api_settings: ApiSettings, tenant_db: Callable[[uuid.UUID], Session]
) -> None:
    created = (await client.post("/api/v1/channel-sessions", json=new_session_body(), headers=org.headers())).json()
    session_id = created["data"]["id"]
    url = f"/api/v1/channel-sessions/{session_id}"

    with_key = await client.patch(url, json={"api_key": API_KEY}, headers=org.headers())
    assert with_key.status_code == 200, with_key.text
    assert with_key.json()["data"]["has_api_key"] is True and with_key.json()["data"]["label"] == "Sales line"
    assert API_KEY not in with_key.text
    row = tenant_db(org.org_id).get(ChannelSession, uuid.UUID(session_id))
    assert row is not None and open_api_key(KeyRing.from_settings(api_settings.runtime), row) == API_KEY

    relabeled = await client.patch(url, json={"label": "Support", "phone_number": None}, headers=org.headers())
    assert relabeled.json()["data"]["label"] == "Support" and relabeled.json()["data"]["phone_number"] is None
    assert relabeled.json()["data"]["has_api_key"] is True

    cleared = await client.patch(url, json={"api_key": None}, headers=org.headers())
    assert cleared.json()["data"]["has_api_key"] is False
    assert (await client.patch(url, json={"label": None}, headers=org.headers())).status_code == 422


async def test_businesses_on_waha_core_share_the_session_name_default(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]
) -> None:
    """WAHA Core has one session, always ``default``, on each business's own server: every one
    connects, with its own webhook URL, and only the first also routes by name (the name-routed
    URL cannot tell them apart). On one server a name is one session: replies go out by name, so a
    second one there would send through the first one's number (409, whoever holds it)."""
    name = f"default-{uuid.uuid4().hex[:8]}"  # other tests share the platform: a name of this test's own
    org_a, org_b = make_org(name="A"), make_org(name="B")
    own = {"external_session": name}
    first = await client.post(
        "/api/v1/channel-sessions",
        json=new_session_body(**own, base_url="http://waha-a.internal:3000"),
        headers=org_a.headers(),
    )
    second = await client.post(
        "/api/v1/channel-sessions",
        json=new_session_body(**own, base_url="http://waha-b.internal:3000"),
        headers=org_b.headers(),
    )
    assert (first.status_code, second.status_code) == (201, 201), second.text
    a, b = first.json()["data"], second.json()["data"]
    assert a["webhook"]["name_routed_path"] == "/api/v1/webhooks/waha"
    assert b["webhook"]["name_routed_path"] is None and b["webhook"]["path"] == f"/api/v1/webhooks/waha/{b['id']}"
    assert str(org_a.org_id) not in second.text

    for org in (org_a, org_b):  # A's server, by create or by moving there: the name is taken
        taken = await client.post(
            "/api/v1/channel-sessions",
            json=new_session_body(**own, base_url="http://waha-a.internal:3000"),
            headers=org.headers(),
        )
        assert taken.status_code == 409 and taken.json()["error"]["code"] == "conflict", taken.text
        assert str(org_a.org_id) not in taken.text and a["id"] not in taken.text
    moved = await client.patch(
        f"/api/v1/channel-sessions/{b['id']}", json={"base_url": "http://waha-a.internal:3000"}, headers=org_b.headers()
    )
    assert moved.status_code == 409, moved.text
    shared = [
        await client.post(
            "/api/v1/channel-sessions", json={**new_session_body(**own), "base_url": None}, headers=o.headers()
        )
        for o in (org_a, org_b)
    ]
    assert [r.status_code for r in shared] == [201, 409], "the platform's shared WAHA is one server too"


async def test_a_server_written_another_way_is_the_same_server(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]
) -> None:
    """Another org may not take a business's session name on its own WAHA by spelling the URL
    differently: with it, ``:connect`` would rewire that number's webhook to the other org."""
    name = f"default-{uuid.uuid4().hex[:8]}"
    server = f"http://waha-{uuid.uuid4().hex[:6]}.internal:3000"
    owner, other = make_org(name="Owner"), make_org(name="Other")
    first = await client.post(
        "/api/v1/channel-sessions",
        json=new_session_body(external_session=name, base_url=server),
        headers=owner.headers(),
    )
    assert first.status_code == 201, first.text
    for spelled in (server.upper().replace("HTTP://", "http://") + "/", server.replace(":3000", ".:3000")):
        taken = await client.post(
            "/api/v1/channel-sessions",
            json=new_session_body(external_session=name, base_url=spelled),
            headers=other.headers(),
        )
        assert taken.status_code == 409, (spelled, taken.text)
    stored = await client.post(
        "/api/v1/channel-sessions",
        json=new_session_body(base_url="HTTPS://WAHA.Example:443/"),
        headers=other.headers(),
    )
    assert stored.json()["data"]["base_url"] == "https://waha.example"


async def test_another_orgs_session_is_not_found(client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]) -> None:
    owner, stranger = make_org(name="Owner"), make_org(name="Stranger")
    created = (await client.post("/api/v1/channel-sessions", json=new_session_body(), headers=owner.headers())).json()
    session_id = created["data"]["id"]

    for method, path, body in (
        ("GET", f"/api/v1/channel-sessions/{session_id}", None),
        ("PATCH", f"/api/v1/channel-sessions/{session_id}", {"label": "mine now"}),
        ("POST", f"/api/v1/channel-sessions/{session_id}:rotate-secret", None),
    ):
        response = await client.request(method, path, json=body, headers=stranger.headers())
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["code"] == "not_found"
    listed = await client.get("/api/v1/channel-sessions", headers=stranger.headers())
    assert listed.json()["data"] == []
    unchanged = await client.get(f"/api/v1/channel-sessions/{session_id}", headers=owner.headers())
    assert unchanged.json()["data"]["label"] == "Sales line"


@pytest.mark.parametrize(
    ("role", "mfa", "read", "write"),
    [
        (Role.VIEWER, True, 403, 403),
        (Role.MANAGER, True, 200, 403),
        (Role.ADMIN, False, 200, 403),
        (Role.ADMIN, True, 200, 201),
    ],
)
async def test_roles(client: httpx.AsyncClient, org: OrgHandle, role: Role, mfa: bool, read: int, write: int) -> None:
    headers = org.headers(role, mfa=mfa)
    assert (await client.get("/api/v1/channel-sessions", headers=headers)).status_code == read
    created = await client.post("/api/v1/channel-sessions", json=new_session_body(), headers=headers)
    assert created.status_code == write
    if role is Role.ADMIN and not mfa:
        assert created.json()["error"]["code"] == "mfa_required"
    assert (await client.get("/api/v1/channel-sessions")).status_code == 401


async def test_list_pages_with_a_cursor(client: httpx.AsyncClient, org: OrgHandle) -> None:
    ids = []
    for _ in range(3):
        created = await client.post("/api/v1/channel-sessions", json=new_session_body(), headers=org.headers())
        ids.append(created.json()["data"]["id"])
    first = (await client.get("/api/v1/channel-sessions?limit=2", headers=org.headers())).json()
    assert [s["id"] for s in first["data"]] == ids[:2] and first["next_cursor"]
    second = (
        await client.get(f"/api/v1/channel-sessions?limit=2&cursor={first['next_cursor']}", headers=org.headers())
    ).json()
    assert [s["id"] for s in second["data"]] == ids[2:] and second["next_cursor"] is None


@pytest.mark.parametrize(
    "overrides",
    [
        {"phone_number": "11 91234-5678"},
        {"external_session": "has spaces"},
        {"external_session": ""},
        {"base_url": "ftp://waha.internal"},
        {"base_url": "http://user:pass@waha.internal"},
        {"base_url": "http://169.254.169.254/latest"},  # the cloud metadata service
        {"base_url": "http://[::ffff:169.254.169.254]"},
        # One server, one spelling: the per-server name check compares the stored text.
        {"base_url": "http://:3000"},
        {"base_url": "http://waha.internal:3000/./"},
        {"base_url": "http://waha.internal:3000/a/%2E%2E/"},
        {"base_url": "http://waha.internal:3000?session=x"},
        {"base_url": "http://waha.internal:3000#top"},
        {"label": ""},
        {"unknown_field": 1},
        {"api_key": ""},
    ],
)
async def test_invalid_bodies_are_422(client: httpx.AsyncClient, org: OrgHandle, overrides: dict[str, Any]) -> None:
    response = await client.post("/api/v1/channel-sessions", json=new_session_body(**overrides), headers=org.headers())
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
    assert "user:pass" not in response.text
