"""What the API shows of the notifier's work, and the endpoints it owns (org webhook, conversations)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from scripts.channel_server import ChannelServer
from services.notifier.settings import NotifierSettings
from switchboard.contracts import HumanMessageRequested, Record, RunStatus, Serde, Topics, TopicSpec
from switchboard.db.enums import Role
from switchboard.db.models import Conversation, Message, OutboxEvent
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.notifications import OrgWebhook, RunDelivery
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


def _human_message_records(world: World, serde: Serde) -> list[HumanMessageRequested]:
    """The ``human_messages`` outbox rows of the world's conversation (the relay has its own tests)."""
    with tenant_session(world.org) as session:
        rows = session.execute(
            select(OutboxEvent.payload)
            .where(
                OutboxEvent.topic == Topics.HUMAN_MESSAGES.name, OutboxEvent.key == str(world.conversation_id).encode()
            )
            .order_by(OutboxEvent.id)
        ).all()
    return [serde.decode(Topics.HUMAN_MESSAGES, bytes(r.payload)) for r in rows]  # type: ignore[misc]


async def test_a_person_answers_the_customer_after_a_handoff_once(
    world: World,
    channel: ChannelServer,
    api: httpx.AsyncClient,
    publish: Publish,
    start_notifier: Start,
    notifier_settings: NotifierSettings,
) -> None:
    """After a handoff the person who took it answers from Switchboard: stored, queued, sent once by the
    notifier (a redelivered record sends nothing), and visible in the inbox with its delivery status."""
    path = f"/api/v1/conversations/{world.conversation_id}/messages"
    manager = world.org.headers(Role.MANAGER)
    refused = await api.post(path, json={"text": "Oi"}, headers=manager)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conversation_not_handed_off"
    await start_notifier()
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(world.run(status=RunStatus.HANDOFF, text=None)))
    await eventually(lambda: world.conversation().status, lambda s: s == "handoff")

    keyed = {**manager, "Idempotency-Key": "reply-1"}
    first = await api.post(path, json={"text": "Olá, aqui é a Ana. Já vejo o seu pedido."}, headers=keyed)
    again = await api.post(path, json={"text": "Olá, aqui é a Ana. Já vejo o seu pedido."}, headers=keyed)
    blank = await api.post(path, json={"text": "   "}, headers=manager)
    assert first.status_code == 202, first.text
    assert again.status_code == 200 and again.json()["data"]["id"] == first.json()["data"]["id"]
    assert blank.status_code == 422
    message = first.json()["data"]
    assert (message["sender"], message["direction"], message["delivery_status"]) == ("human", "outbound", "pending")

    [record] = _human_message_records(world, Serde.from_settings(notifier_settings.kafka))
    assert (str(record.message_id), record.chat_id) == (message["id"], world.chat_id)
    await publish(Topics.HUMAN_MESSAGES, record)
    await publish(Topics.HUMAN_MESSAGES, record)  # a replay sends nothing more
    await eventually(lambda: [s.text for s in channel.delivered], lambda t: t == [message["body"]])
    marker = world.run(text="marker")  # the partition moved past both copies (withheld: the humans')
    await publish(Topics.RUN_COMPLETED, marker)
    await eventually(lambda: [d.status for d in world.deliveries(marker.run_id)], lambda s: s == ["failed"])

    assert [s.text for s in channel.delivered] == [message["body"]]
    with tenant_session(world.org) as session:
        [delivery] = session.scalars(select(RunDelivery).where(RunDelivery.message_id == record.message_id)).all()
        conversation = session.get_one(Conversation, world.conversation_id)
        audit = session.scalars(
            select(AuditLogEntry.action).where(AuditLogEntry.target_id == str(world.conversation_id))
        ).all()
    assert (delivery.kind, delivery.status, delivery.run_id) == ("human", "sent", None)
    assert conversation.assigned_user_id == world.org.admin_user_id  # the writer took it
    assert "conversation.message_sent" in audit
    shown = (await api.get(path, headers=manager)).json()["data"]
    assert [(m["sender"], m["delivery_status"]) for m in shown if m["id"] == message["id"]] == [("human", "sent")]


async def test_a_persons_message_queued_before_the_contacts_erasure_is_never_sent(
    world: World,
    channel: ChannelServer,
    api: httpx.AsyncClient,
    publish: Publish,
    start_notifier: Start,
    notifier_settings: NotifierSettings,
) -> None:
    """A person answered from Switchboard; the contact was erased before the notifier handled it
    (outbox lag, the notifier down). The record carries the person's real number: nothing goes out
    to someone who asked to be forgotten — it sent them "[erased]"."""
    await start_notifier()
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(world.run(status=RunStatus.HANDOFF, text=None)))
    await eventually(lambda: world.conversation().status, lambda s: s == "handoff")
    path = f"/api/v1/conversations/{world.conversation_id}/messages"
    sent = await api.post(path, json={"text": "Ana, seu pedido saiu."}, headers=world.org.headers(Role.MANAGER))
    assert sent.status_code == 202, sent.text
    [record] = _human_message_records(world, Serde.from_settings(notifier_settings.kafka))
    erased = await api.post(f"/api/v1/contacts/{world.contact_id}:erase", headers=world.org.headers())
    assert erased.status_code == 200, erased.text

    await publish(Topics.HUMAN_MESSAGES, record)

    def outcome() -> tuple[str, str | None]:
        with tenant_session(world.org) as session:
            message = session.get_one(Message, record.message_id)
            return message.delivery_status, message.delivery_error

    await eventually(outcome, lambda o: o == ("failed", "contact_erased"))
    assert channel.received == [], "nothing reached the erased contact"
