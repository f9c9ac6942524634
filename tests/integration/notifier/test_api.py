"""What the API shows of the notifier's work, and the endpoints it owns (org webhook, conversations)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from scripts.channel_server import ChannelServer
from switchboard.contracts import Record, Topics, TopicSpec
from switchboard.db.enums import Role
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.notifications import OrgWebhook
from tests.integration.notifier.conftest import RunningNotifier, World, eventually
from tests.support.agents import tenant_session
from tests.support.api import create_org
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]
Start = Callable[..., Awaitable[RunningNotifier]]


async def test_a_refused_reply_shows_as_completed_but_not_delivered(
    world: World, channel: ChannelServer, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    channel.fail_next(400)
    refused, delivered = world.run(text="refused"), world.run(text="delivered")
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, refused)
    await publish(Topics.RUN_COMPLETED, delivered)
    await eventually(lambda: [d.status for d in world.deliveries(delivered.run_id)], lambda s: s == ["sent"])

    headers = world.org.headers(Role.MANAGER)
    one = (await api.get(f"/api/v1/runs/{refused.run_id}", headers=headers)).json()["data"]
    assert one["status"] == "completed" and one["delivery_status"] == "failed"
    listed = (await api.get("/api/v1/runs", headers=headers)).json()["data"]
    by_id = {r["id"]: r["delivery_status"] for r in listed}
    assert by_id[str(refused.run_id)] == "failed" and by_id[str(delivered.run_id)] == "sent"
    detail = (await api.get(f"/api/v1/runs/{delivered.run_id}", headers=headers)).json()["data"]
    assert detail["outbound_message_id"] is not None


async def test_org_webhook_secret_is_shown_once_sealed_at_rest_and_audited(
    world: World, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    admin = world.org.headers()
    assert (await api.get("/api/v1/org-webhook", headers=admin)).status_code == 404
    for url in ("ftp://x", "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/hook"):
        bad = await api.put("/api/v1/org-webhook", json={"url": url}, headers=admin)
        assert bad.status_code == 422, url
    first = (await api.put("/api/v1/org-webhook", json={"url": "https://a.example/h"}, headers=admin)).json()["data"]
    second = (await api.put("/api/v1/org-webhook", json={"url": "https://b.example/h"}, headers=admin)).json()["data"]
    assert first["secret"].startswith("sbowh_") and second["secret"] != first["secret"]
    assert second["id"] == first["id"]

    view = await api.get("/api/v1/org-webhook", headers=world.org.headers(Role.MANAGER))
    assert view.status_code == 200 and view.json()["data"]["url"] == "https://b.example/h"
    assert "secret" not in view.json()["data"] and second["secret"] not in view.text
    with tenant_session(world.org) as session:
        row = session.scalars(select(OrgWebhook)).one()
        assert second["secret"].encode() not in bytes(row.secret_ciphertext)
        actions = list(session.scalars(select(AuditLogEntry.action).where(AuditLogEntry.target_id == first["id"])))
    assert sorted(actions) == ["org_webhook.created", "org_webhook.replaced"]

    other = create_org(stack.database_url)  # another org sees none of it
    assert (await api.get("/api/v1/org-webhook", headers=other.headers())).status_code == 404
    assert (await api.delete("/api/v1/org-webhook", headers=other.headers())).status_code == 404
    assert (await api.delete("/api/v1/org-webhook", headers=admin)).status_code == 204
    assert (await api.get("/api/v1/org-webhook", headers=admin)).status_code == 404


async def test_conversations_of_another_org_are_not_found(
    world: World, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    other = create_org(stack.database_url)
    path = f"/api/v1/conversations/{world.conversation_id}"
    assert (await api.get(path, headers=other.headers())).status_code == 404
    assert (await api.post(f"{path}:handback", headers=other.headers())).status_code == 404
    mine = await api.get(path, headers=world.org.headers(Role.MANAGER))
    assert mine.status_code == 200 and mine.json()["data"]["status"] == "open"
    not_handed_off = await api.post(f"{path}:handback", headers=world.org.headers(Role.MANAGER))
    assert not_handed_off.status_code == 409
