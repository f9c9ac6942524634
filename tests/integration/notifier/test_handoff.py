"""Handoffs assign the conversation to humans and tell them through the org's signed webhook;
budget incidents reach the org's admins the same way; the API hands conversations back."""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from scripts.channel_server import ChannelServer
from scripts.demo.scenario import signed_by as verify  # what a receiver does: the HMAC over "<timestamp>.<body>"
from services.notifier.settings import NotifierSettings
from switchboard.contracts import Insight, InsightKind, Record, RunStatus, Serde, Topics, TopicSpec, WakeReason
from switchboard.crypto import KeyRing
from switchboard.db.enums import Role
from switchboard.db.models.notifications import OrgNotification
from switchboard.db.models.outbox import OutboxEvent
from tests.integration.notifier.conftest import RunningNotifier, WebhookReceiver, World, eventually
from tests.support.agents import tenant_session

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]
Start = Callable[..., Awaitable[RunningNotifier]]


async def set_webhook(api: httpx.AsyncClient, world: World, url: str) -> str:
    response = await api.put("/api/v1/org-webhook", json={"url": url}, headers=world.org.headers())
    assert response.status_code == 200, response.text
    return str(response.json()["data"]["secret"])


def notifications(world: World) -> list[OrgNotification]:
    with tenant_session(world.org) as session:
        return list(session.scalars(select(OrgNotification).order_by(OrgNotification.created_at)))


async def test_handoff_assigns_the_conversation_and_notifies_the_signed_webhook_once(
    world: World,
    channel: ChannelServer,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    publish: Publish,
    start_notifier: Start,
) -> None:
    secret = await set_webhook(api, world, receiver.url)
    receiver.fail_next(503)  # the first attempt fails: retried with backoff
    run = world.run(status=RunStatus.HANDOFF, text="Vou chamar alguém da equipe.")
    handoff = world.handoff(run)
    await start_notifier()
    await publish(Topics.HANDOFF_TRIGGERED, handoff)
    await publish(Topics.RUN_COMPLETED, run)
    await publish(Topics.HANDOFF_TRIGGERED, handoff)  # redelivered: assigns and notifies nothing more

    await eventually(lambda: [n.status for n in notifications(world)], lambda s: s == ["sent"])
    conversation = world.conversation()
    assert conversation.status == "handoff" and conversation.handoff_at is not None
    assert len(receiver.hits) == 2  # 503, then the delivery
    first, delivered = receiver.hits
    assert first.headers["X-Switchboard-Event-Id"] == delivered.headers["X-Switchboard-Event-Id"]
    assert verify(secret, delivered.headers, delivered.body)
    assert not verify("another-secret", delivered.headers, delivered.body)
    event = delivered.json()
    assert event["type"] == "conversation.handoff" and event["org_id"] == str(world.org.org_id)
    assert event["data"]["conversation_id"] == str(world.conversation_id)
    assert event["data"]["run_id"] == str(run.run_id) and event["data"]["urgency"] == "high"

    # The handoff run's reply is never sent to the customer, nor is a run's that ends while the
    # humans own the conversation (withheld); the redelivery is handled by now.
    marker = world.run(text="marker")
    await publish(Topics.RUN_COMPLETED, marker)
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(marker, dry_run=True))
    await eventually(lambda: [d.status for d in world.deliveries(marker.run_id)], lambda s: s == ["failed"])
    assert channel.received == []
    assert len(receiver.hits) == 2 and len(notifications(world)) == 1

    # The humans read it, then hand it back: the agents are woken through the outbox.
    view = await api.get(f"/api/v1/conversations/{world.conversation_id}", headers=world.org.headers(Role.MANAGER))
    assert view.status_code == 200 and view.json()["data"]["status"] == "handoff"
    back = await api.post(
        f"/api/v1/conversations/{world.conversation_id}:handback", headers=world.org.headers(Role.MANAGER)
    )
    assert back.status_code == 200, back.text
    assert back.json()["data"]["status"] == "open" and back.json()["data"]["agent_woken"] is True
    assert world.conversation().status == "open"
    with tenant_session(world.org) as session:
        [row] = session.scalars(
            select(OutboxEvent).where(
                OutboxEvent.topic == Topics.DISPATCH_REQUESTED.name,
                OutboxEvent.key == str(world.conversation_id).encode(),
            )
        )
    wake = Serde.from_settings(api_kafka(api)).decode(Topics.DISPATCH_REQUESTED, row.payload)
    assert wake.wake_reason is WakeReason.ASSIGNMENT and wake.message is None
    assert wake.wake_context.assigned_by_user_id == world.org.admin_user_id
    again = await api.post(
        f"/api/v1/conversations/{world.conversation_id}:handback", headers=world.org.headers(Role.MANAGER)
    )
    assert again.status_code == 409 and again.json()["error"]["code"] == "conversation_not_handed_off"

    # A late redelivery of the old handoff does not take the conversation back from the agents.
    await publish(Topics.HANDOFF_TRIGGERED, handoff)
    late_marker = world.run(text="late marker")
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(late_marker, dry_run=True))
    await publish(Topics.RUN_COMPLETED, late_marker)
    await eventually(lambda: [d.status for d in world.deliveries(late_marker.run_id)], lambda s: s == ["sent"])
    assert world.conversation().status == "open"


def api_kafka(api: httpx.AsyncClient) -> Any:
    transport = api._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app.state.settings.kafka  # type: ignore[attr-defined]


async def test_handoff_without_a_webhook_still_assigns_and_records_why_nobody_was_told(
    world: World, publish: Publish, start_notifier: Start
) -> None:
    run = world.run(status=RunStatus.HANDOFF)
    await start_notifier()
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(run))
    [note] = await eventually(lambda: notifications(world), lambda n: [x.status for x in n] == ["skipped"])
    assert note.error_code == "no_webhook"
    assert world.conversation().status == "handoff"


def insight(world: World, key: str) -> Insight:
    return Insight(
        org_id=world.org.org_id,
        insight_id=uuid.uuid4(),
        insight_key=key,
        insight_date=date(2026, 11, 30),
        kind=InsightKind.INSIGHT,
        area="budget",
        title="Agent reached 80% of its monthly budget",
        body="Spend so far: US$ 8.00 of US$ 10.00.",
        agent_id=world.agent_id,
    )


async def test_budget_incidents_notify_the_admins_once_per_key(
    world: World, receiver: WebhookReceiver, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    secret = await set_webhook(api, world, receiver.url)
    key = f"budget_incident:{world.agent_id}:2026-11:warning"
    await start_notifier()
    await publish(Topics.INSIGHTS, insight(world, key))
    await publish(Topics.INSIGHTS, insight(world, key))  # the same incident republished (e.g. its status changed)
    await publish(Topics.INSIGHTS, insight(world, "weekly_summary:2026-48"))  # not an incident: not notified
    hard = f"budget_incident:{world.agent_id}:2026-11:hard"
    await publish(Topics.INSIGHTS, insight(world, hard))

    await eventually(lambda: [n.status for n in notifications(world)], lambda s: s == ["sent", "sent"])
    # Different keys may sit on different partitions, handled side by side: no order between them.
    assert sorted(h.json()["data"]["insight_key"] for h in receiver.hits) == sorted([key, hard])
    assert all(h.json()["type"] == "budget.incident" for h in receiver.hits)
    assert all(verify(secret, h.headers, h.body) for h in receiver.hits)


async def test_a_disconnected_number_notifies_the_admins(
    world: World, receiver: WebhookReceiver, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    """The API's ``channel_down:`` insight (a WhatsApp number stopped working) reaches the org's webhook."""
    secret = await set_webhook(api, world, receiver.url)
    key = f"channel_down:{world.channel_id}:20261202T080000000000Z"
    await start_notifier()
    await publish(Topics.INSIGHTS, insight(world, key))

    await eventually(lambda: [n.status for n in notifications(world)], lambda s: s == ["sent"])
    [hit] = receiver.hits
    assert (hit.json()["type"], hit.json()["data"]["insight_key"]) == ("channel.disconnected", key)
    assert verify(secret, hit.headers, hit.body)


async def test_a_handoff_acknowledgement_reaches_the_customer_once(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """A version's handoff message (the runner makes it the run's text and names the target) is
    sent once, like a reply; what the run had queued with the send tool is not."""
    run = world.run(status=RunStatus.HANDOFF, text="Um momento: vou chamar alguém da equipe.", send_to=True)
    queued = world.queue_intent(run, "queued before the handoff")
    await start_notifier()
    for _ in range(2):  # a redelivery sends nothing more
        await publish(Topics.RUN_COMPLETED, run)
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(run))
    await eventually(lambda: [c.text for c in channel.delivered], lambda t: t == [run.final_text])
    # The handoff comes on its own topic: the marker below is withheld only once it was applied.
    await eventually(lambda: world.conversation().status, lambda s: s == "handoff")
    marker = world.run(text="marker")  # withheld (the humans own the conversation), once handled
    await publish(Topics.RUN_COMPLETED, marker)
    await eventually(lambda: [d.status for d in world.deliveries(marker.run_id)], lambda s: s == ["failed"])
    assert [c.text for c in channel.delivered] == [run.final_text]
    statuses = {d.message_id: d.status for d in world.deliveries(run.run_id)}
    assert statuses.get(queued) != "sent", "the queued send-tool message is not delivered after a handoff"
    assert world.conversation().status == "handoff"


async def test_a_webhook_secret_that_does_not_open_fails_the_notice_instead_of_leaving_it_pending(
    world: World,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    publish: Publish,
    notifier_settings: NotifierSettings,
) -> None:
    """The org's webhook secret was sealed under a key the notifier's ring no longer holds (removed
    too early in a rotation): the notice ends ``failed`` with a stable code — before, it stayed
    ``pending``, invisible, and a hundred such rows filled every sweep's batch for good."""
    await set_webhook(api, world, receiver.url)
    other_ring = KeyRing([("rotated-away", os.urandom(32))])
    notifier = await RunningNotifier(notifier_settings, other_ring).wait_ready()
    try:
        run = world.run(status=RunStatus.HANDOFF, text="Vou chamar alguém da equipe.")
        await publish(Topics.HANDOFF_TRIGGERED, world.handoff(run))
        [notice] = await eventually(lambda: notifications(world), lambda found: [n.status for n in found] == ["failed"])
    finally:
        await notifier.stop()
    assert notice.error_code == "webhook_secret_unreadable"
    assert receiver.hits == []
    assert world.conversation().status == "handoff", "the handoff itself holds"
