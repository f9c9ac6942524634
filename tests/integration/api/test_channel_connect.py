"""Connecting a WhatsApp number from Switchboard: the API configures the WAHA session's webhook and
shows its QR code, against a local WAHA-compatible server (scripts/channel_server.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select

from scripts.channel_server import ChannelServer
from services.api.settings import ApiSettings
from services.api.webhooks.service import sign
from switchboard.db.enums import Role
from switchboard.db.models.channels import Conversation
from switchboard.db.models.followups import ScheduledFollowup
from tests.integration.api.conftest import serve
from tests.integration.api.test_webhook import Channel, message_event
from tests.support.agents import tenant_session
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

WAHA_KEY = "waha-test-key-0123456789"
PUBLIC_URL = "https://switchboard.example.com"


@pytest.fixture
async def waha() -> AsyncIterator[ChannelServer]:
    server = await ChannelServer(api_key=WAHA_KEY, strict_sessions=True).start()
    yield server
    await server.stop()


@pytest.fixture
async def public_client(api_settings: ApiSettings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(api_settings.model_copy(update={"public_url": PUBLIC_URL})) as http:
        yield http


async def _session(client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer, api_key: str) -> dict[str, str]:
    body = {
        "label": "Loja",
        "external_session": f"loja-{uuid.uuid4().hex[:6]}",
        "base_url": waha.url,
        "api_key": api_key,
    }
    created = await client.post("/api/v1/channel-sessions", json=body, headers=org.headers())
    assert created.status_code == 201, created.text
    return dict(created.json()["data"])


async def test_connect_points_the_waha_session_at_its_webhook_and_shows_the_qr_code(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    session = await _session(public_client, org, waha, WAHA_KEY)
    # WAHA has the session already, with a webhook of another tool and settings of its own.
    other_hook = {"url": "https://crm.example/hook", "events": ["message"]}
    waha.add_session(session["external_session"], {"webhooks": [other_hook], "metadata": {"team": "sales"}})
    path = f"/api/v1/channel-sessions/{session['id']}"
    denied = await public_client.post(f"{path}:connect", headers=org.headers(Role.MANAGER))
    assert denied.status_code == 403

    connected = await public_client.post(f"{path}:connect", headers=org.headers())
    assert connected.status_code == 200, connected.text
    data = connected.json()["data"]
    assert data["waha_status"] == "WORKING"
    assert data["webhook_url"] == f"{PUBLIC_URL}/api/v1/webhooks/waha/{session['id']}"
    # WAHA now signs its deliveries with the session's secret and sends them to its own URL.
    hook = waha.webhooks[session["external_session"]]
    assert hook.url == data["webhook_url"] and hook.key == session["webhook_secret"]
    assert {"message", "message.any", "message.ack", "session.status"} <= hook.events
    assert session["webhook_secret"] not in connected.text and WAHA_KEY not in connected.text
    # WAHA's PUT replaces the whole config: ours is merged into it, nothing else is lost.
    config = waha.configs[session["external_session"]]
    assert config["metadata"] == {"team": "sales"} and config["webhooks"][0] == other_hook
    assert [w["url"] for w in config["webhooks"]] == [other_hook["url"], data["webhook_url"]]
    assert waha.sessions_created == []
    again = await public_client.post(f"{path}:connect", headers=org.headers())
    assert again.status_code == 200 and len(waha.configs[session["external_session"]]["webhooks"]) == 2

    qr = await public_client.get(f"{path}/qr", headers=org.headers())
    assert qr.status_code == 200, qr.text
    assert qr.json()["data"]["mimetype"] == "image/png" and qr.json()["data"]["data"]
    # Handing out a code that links a phone to the number is audited, like connecting it.
    audit = await public_client.get(
        "/api/v1/audit", params={"action": "channel_session.qr_shown"}, headers=org.headers()
    )
    assert [e["target_id"] for e in audit.json()["data"]] == [session["id"]], audit.text


async def test_a_session_config_whose_webhooks_are_not_a_list_is_replaced_not_a_500(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    """The business's WAHA holds a config another tool wrote: ``webhooks`` may be anything there."""
    session = await _session(public_client, org, waha, WAHA_KEY)
    waha.add_session(session["external_session"], {"webhooks": 5, "metadata": {"team": "sales"}})
    connected = await public_client.post(f"/api/v1/channel-sessions/{session['id']}:connect", headers=org.headers())
    assert connected.status_code == 200, connected.text
    config = waha.configs[session["external_session"]]
    assert [w["url"] for w in config["webhooks"]] == [connected.json()["data"]["webhook_url"]]
    assert config["metadata"] == {"team": "sales"}


async def test_a_refused_api_key_or_an_unreachable_waha_is_a_clear_502(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    session = await _session(public_client, org, waha, "not-the-key")
    refused = await public_client.post(f"/api/v1/channel-sessions/{session['id']}:connect", headers=org.headers())
    assert refused.status_code == 502, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["details"]["reason"], error["details"]["status"]) == (
        "channel_unavailable",
        "channel_unauthorized",
        401,
    )
    assert "not-the-key" not in refused.text
    await waha.stop()
    gone = await public_client.get(f"/api/v1/channel-sessions/{session['id']}/qr", headers=org.headers())
    assert gone.status_code == 502 and gone.json()["error"]["details"]["reason"] == "channel_unreachable"


async def test_without_a_public_url_there_is_no_webhook_to_point_at(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle], waha: ChannelServer
) -> None:
    org, stranger = make_org(), make_org()
    session = await _session(client, org, waha, WAHA_KEY)
    path = f"/api/v1/channel-sessions/{session['id']}:connect"
    unset = await client.post(path, headers=org.headers())
    assert unset.status_code == 409 and unset.json()["error"]["code"] == "public_url_not_set", unset.text
    assert (await client.post(path, headers=stranger.headers())).status_code == 404
    assert waha.webhooks == {}


async def test_a_session_waha_does_not_have_is_created(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    session = await _session(public_client, org, waha, WAHA_KEY)
    connected = await public_client.post(f"/api/v1/channel-sessions/{session['id']}:connect", headers=org.headers())
    assert connected.status_code == 200, connected.text
    assert waha.sessions_created == [session["external_session"]]
    assert waha.webhooks[session["external_session"]].key == session["webhook_secret"]


async def test_a_base_url_naming_the_platforms_waha_cannot_reach_another_orgs_session(
    public_client: httpx.AsyncClient, make_org: Callable[..., OrgHandle], api_settings: ApiSettings
) -> None:
    """Session names are unique per server as written: the platform's WAHA under its own URL would
    let this session name another org's session there and rewrite its webhook."""
    victim, intruder = make_org(), make_org()
    name = f"loja-{uuid.uuid4().hex[:6]}"
    on_platform = {"label": "Loja", "external_session": name}  # no base_url: the platform's WAHA
    assert (
        await public_client.post("/api/v1/channel-sessions", json=on_platform, headers=victim.headers())
    ).status_code == 201
    alias = {"label": "Alias", "external_session": name, "base_url": api_settings.waha_base_url}
    created = await public_client.post("/api/v1/channel-sessions", json=alias, headers=intruder.headers())
    assert created.status_code == 201, created.text  # another server as written: the create cannot tell
    refused = await public_client.post(
        f"/api/v1/channel-sessions/{created.json()['data']['id']}:connect", headers=intruder.headers()
    )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "channel_base_url_refused", refused.text


async def test_disconnect_unlinks_the_phone_stops_the_session_and_connect_links_it_again(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    session = await _session(public_client, org, waha, WAHA_KEY)
    path = f"/api/v1/channel-sessions/{session['id']}"
    assert (await public_client.post(f"{path}:connect", headers=org.headers())).status_code == 200
    denied = await public_client.post(f"{path}:disconnect", headers=org.headers(Role.MANAGER))
    assert denied.status_code == 403

    disconnected = await public_client.post(f"{path}:disconnect", headers=org.headers())
    assert disconnected.status_code == 200, disconnected.text
    data = disconnected.json()["data"]
    assert (data["waha_status"], data["session"]["status"]) == ("STOPPED", "stopped")
    assert waha.logged_out == [session["external_session"]] and session["external_session"] not in waha.webhooks
    shown = await public_client.get(path, headers=org.headers())
    assert shown.json()["data"]["status"] == "stopped"
    audit = await public_client.get(
        "/api/v1/audit", params={"action": "channel_session.disconnected"}, headers=org.headers()
    )
    assert audit.status_code == 200, audit.text
    assert [e["target_id"] for e in audit.json()["data"]] == [session["id"]]

    again = await public_client.post(f"{path}:connect", headers=org.headers())
    assert again.status_code == 200 and again.json()["data"]["waha_status"] == "WORKING"


async def test_disconnecting_a_session_waha_does_not_have_is_already_done(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    session = await _session(public_client, org, waha, WAHA_KEY)  # never connected: WAHA has no such session
    gone = await public_client.post(f"/api/v1/channel-sessions/{session['id']}:disconnect", headers=org.headers())
    assert gone.status_code == 200, gone.text
    assert gone.json()["data"]["waha_status"] == "STOPPED" and waha.logged_out == []


async def test_an_archived_number_is_logged_out_routes_and_sends_nothing_and_frees_its_name(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    """A number given up: WAHA logs it out and stops it, then the session is archived. Kept for its
    conversations, it routes no webhook, sends nothing (a person's reply is refused, its scheduled
    follow-ups are cancelled), can no longer be changed or connected, and its name is free on its
    server for the new phone."""
    session = await _session(public_client, org, waha, WAHA_KEY)
    session_id, name, secret = session["id"], session["external_session"], session["webhook_secret"]
    path = f"/api/v1/channel-sessions/{session_id}"
    assert (await public_client.post(f"{path}:connect", headers=org.headers())).status_code == 200

    async def deliver(url: str, body: str) -> int:
        raw = json.dumps(message_event(Channel(org, uuid.UUID(session_id), name, secret), body=body)).encode()
        return (await public_client.post(url, content=raw, headers={"X-Webhook-Hmac": sign(secret, raw)})).status_code

    assert await deliver(f"/api/v1/webhooks/waha/{session_id}", "Oi") == 200
    with tenant_session(org) as db:
        conversation = db.scalars(select(Conversation).where(Conversation.channel_session_id == session_id)).one()
        followup = ScheduledFollowup(
            org_id=org.org_id,
            conversation_id=conversation.id,
            due_at=datetime.now(UTC) + timedelta(days=1),
            reason="ver se chegou",
        )
        db.add(followup)
    taken = await public_client.post(f"/api/v1/conversations/{conversation.id}:takeover", headers=org.headers())
    assert taken.status_code == 200, taken.text

    archived = await public_client.post(f"{path}:archive", headers=org.headers())
    assert archived.status_code == 200, archived.text
    data = archived.json()["data"]
    assert data["archived_at"] is not None and data["status"] == "stopped"
    assert waha.logged_out == [name], "no login is left behind for whoever takes the name"
    again = await public_client.post(f"{path}:archive", headers=org.headers())
    assert again.json()["data"]["archived_at"] == data["archived_at"], "archiving twice changes nothing"
    assert waha.logged_out == [name]

    assert await deliver(f"/api/v1/webhooks/waha/{session_id}", "Oi de novo") == 401, "routed by its URL: gone"
    assert await deliver("/api/v1/webhooks/waha", "Oi de novo") == 401, "routed by its name: gone"
    reply = await public_client.post(
        f"/api/v1/conversations/{conversation.id}/messages", json={"text": "Olá!"}, headers=org.headers()
    )
    assert reply.status_code == 409 and reply.json()["error"]["code"] == "channel_session_archived", reply.text
    for woken in (
        await public_client.post(f"/api/v1/conversations/{conversation.id}:handback", headers=org.headers()),
        await public_client.post(
            f"/api/v1/conversations/{conversation.id}:wake", json={"reason": "assignment"}, headers=org.headers()
        ),
    ):  # the agents could answer through nothing
        assert woken.status_code == 409 and woken.json()["error"]["code"] == "channel_session_archived", woken.text
    with tenant_session(org) as db:
        kept = db.get(ScheduledFollowup, followup.id)
        assert kept is not None and (kept.status, kept.error) == ("cancelled", "channel_session_archived")
    live = (await public_client.get("/api/v1/channel-sessions", headers=org.headers())).json()["data"]
    gone = (await public_client.get("/api/v1/channel-sessions?archived=true", headers=org.headers())).json()["data"]
    assert session_id not in [s["id"] for s in live] and [s["id"] for s in gone] == [session_id]
    for refused in (
        await public_client.patch(path, json={"label": "De novo"}, headers=org.headers()),
        await public_client.post(f"{path}:rotate-secret", headers=org.headers()),
        await public_client.post(f"{path}:connect", headers=org.headers()),
        await public_client.post(f"{path}:disconnect", headers=org.headers()),
        await public_client.get(f"{path}/qr", headers=org.headers()),
    ):
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "channel_session_archived", (
            refused.request.url,
            refused.text,
        )

    body = {"label": "Novo telefone", "external_session": name, "base_url": waha.url, "api_key": WAHA_KEY}
    reused = await public_client.post("/api/v1/channel-sessions", json=body, headers=org.headers())
    assert reused.status_code == 201, reused.text
    assert reused.json()["data"]["webhook"]["name_routed_path"] == "/api/v1/webhooks/waha", "the name routes again"
    audit = await public_client.get(
        "/api/v1/audit", params={"action": "channel_session.archived"}, headers=org.headers()
    )
    assert [e["target_id"] for e in audit.json()["data"]] == [session_id]


async def test_a_number_waha_cannot_log_out_is_not_archived(
    public_client: httpx.AsyncClient, org: OrgHandle, waha: ChannelServer
) -> None:
    """Archiving frees the name: with the phone possibly still logged in, it waits for WAHA."""
    session = await _session(public_client, org, waha, "a-key-waha-refuses")
    refused = await public_client.post(f"/api/v1/channel-sessions/{session['id']}:archive", headers=org.headers())
    assert refused.status_code == 502 and refused.json()["error"]["code"] == "channel_unavailable", refused.text
    shown = await public_client.get(f"/api/v1/channel-sessions/{session['id']}", headers=org.headers())
    assert shown.json()["data"]["archived_at"] is None
