"""A failed or aborted run that leaves a customer waiting is announced to the org's humans once
(runs whose messages another run answers are not), and a person can take the conversation over."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from scripts.channel_server import ChannelServer
from switchboard.contracts import Record, RunStatus, Serde, Topics, TopicSpec
from switchboard.contracts.enums import ErrorFamily, SteeringKind, Vitality
from switchboard.db.enums import Role
from switchboard.db.models import AiAgentRun, OutboxEvent
from switchboard.db.models.audit import AuditLogEntry
from switchboard.settings import KafkaSettings
from tests.integration.notifier.conftest import RunningNotifier, WebhookReceiver, World, eventually
from tests.integration.notifier.test_handoff import notifications, set_webhook, verify
from tests.support.agents import tenant_session

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]
Start = Callable[..., Awaitable[RunningNotifier]]


async def test_a_run_that_fails_its_customer_is_announced_once_and_sends_nothing(
    world: World,
    channel: ChannelServer,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    publish: Publish,
    start_notifier: Start,
) -> None:
    secret = await set_webhook(api, world, receiver.url)
    messages = (uuid.uuid4(), uuid.uuid4())
    failed = world.run(status=RunStatus.FAILED, text=None).model_copy(
        update={
            "message_ids": messages,
            "vitality": Vitality.FAILED,
            "error_family": ErrorFamily.TRANSIENT_UPSTREAM,
            "error_code": "provider_unavailable",
            "error_message": "upstream said: overloaded",
        }
    )
    budget = world.run(status=RunStatus.ABORTED, text=None).model_copy(
        update={
            "message_ids": messages[:1],
            "vitality": Vitality.STALLED,
            "error_family": ErrorFamily.BUDGET_EXCEEDED,
            "abort_reason": "max_steps_reached",
        }
    )
    # Others answer these: a follow-up run takes the interrupted run's messages, the
    # dispatcher recovers a hand-back; a run with no customer message has no one waiting.
    interrupted = world.run(status=RunStatus.ABORTED, text=None).model_copy(
        update={"message_ids": messages, "vitality": Vitality.ALIVE, "abort_reason": "interrupted"}
    )
    handed_back = world.run(status=RunStatus.FAILED, text=None).model_copy(
        update={
            "message_ids": messages,
            "vitality": Vitality.DEAD,
            "error_family": ErrorFamily.PROCESS_LOST,
            "error_code": "runner_shutdown",
        }
    )
    scheduled = world.run(status=RunStatus.FAILED, text=None).model_copy(update={"vitality": Vitality.FAILED})
    dry = failed.model_copy(update={"run_id": uuid.uuid4(), "event_id": uuid.uuid4(), "dry_run": True})

    await start_notifier()
    for run in (failed, interrupted, handed_back, scheduled, dry, budget, failed):  # `failed` redelivered
        await publish(Topics.RUN_COMPLETED, run)

    await eventually(lambda: sorted(n.status for n in notifications(world)), lambda s: s == ["sent", "sent"])
    await eventually(lambda: len(receiver.hits), lambda n: n == 2)
    assert all(verify(secret, hit.headers, hit.body) for hit in receiver.hits)
    events = {hit.json()["data"]["run_id"]: hit.json() for hit in receiver.hits}
    assert set(events) == {str(failed.run_id), str(budget.run_id)}
    event = events[str(failed.run_id)]
    assert event["type"] == "conversation.unanswered"
    assert event["data"] == {
        "conversation_id": str(world.conversation_id),
        "contact_id": str(world.contact_id),
        "channel_session_id": str(world.channel_id),
        "run_id": str(failed.run_id),
        "agent_id": str(world.agent_id),
        "attempt": 1,
        "status": "failed",
        "vitality": "failed",
        "error_family": "transientUpstream",
        "error_code": "provider_unavailable",
        "abort_reason": None,
        "unanswered_messages": 2,
    }
    assert "overloaded" not in receiver.hits[0].body.decode() + receiver.hits[1].body.decode()
    assert events[str(budget.run_id)]["data"]["abort_reason"] == "max_steps_reached"
    assert channel.received == [], "nothing reaches the customer"
    assert world.conversation().status == "open", "the agents keep the conversation"


async def test_a_person_takes_the_conversation_over_answers_and_hands_it_back(
    world: World, api: httpx.AsyncClient
) -> None:
    manager = world.org.headers(Role.MANAGER)
    path = f"/api/v1/conversations/{world.conversation_id}"
    before = await api.post(f"{path}/messages", json={"text": "Oi, sou a Ana."}, headers=manager)
    assert before.status_code == 409 and before.json()["error"]["code"] == "conversation_not_handed_off"

    taken = await api.post(f"{path}:takeover", headers=world.org.headers())
    assert taken.status_code == 200, taken.text
    view = taken.json()["data"]
    assert view["status"] == "handoff" and view["assigned_user_id"] == str(world.org.admin_user_id)
    assert view["handoff_at"] is not None
    # Claimed by a second person (a colleague, with their own login): assigned to her, the
    # handoff time kept — it says when the agents stopped.
    email, password = f"bea-{uuid.uuid4().hex[:8]}@example.com", "a long enough password"
    added = await api.post(
        "/api/v1/members",
        json={"email": email, "role": "manager", "password": password},
        headers=world.org.headers(),
    )
    assert added.status_code == 201, added.text
    login = await api.post(
        "/api/v1/auth/login", json={"email": email, "password": password, "org_id": str(world.org.org_id)}
    )
    bea = {"Authorization": f"Bearer {login.json()['data']['token']}"}
    claimed = await api.post(f"{path}:takeover", headers=bea)
    assert claimed.status_code == 200
    assert claimed.json()["data"]["handoff_at"] == view["handoff_at"]
    assert claimed.json()["data"]["assigned_user_id"] == added.json()["data"]["user_id"] != view["assigned_user_id"]
    with tenant_session(world.org) as session:
        actions = list(
            session.scalars(
                select(AuditLogEntry.action)
                .where(AuditLogEntry.target_id == str(world.conversation_id))
                .order_by(AuditLogEntry.created_at)
            )
        )
    assert actions == ["conversation.taken_over", "conversation.taken_over"]

    # Now the person can answer (the send itself: test_api.py).
    answered = await api.post(f"{path}/messages", json={"text": "Oi, sou a Ana."}, headers=manager)
    assert answered.status_code == 202, answered.text
    assert answered.json()["data"]["sender"] == "human"

    back = await api.post(f"{path}:handback", headers=manager)
    assert back.status_code == 200 and back.json()["data"]["status"] == "open"
    missing = await api.post(f"/api/v1/conversations/{uuid.uuid4()}:takeover", headers=manager)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_a_handoff_from_the_run_still_going_keeps_the_person_who_took_over(
    world: World, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    taken = await api.post(f"/api/v1/conversations/{world.conversation_id}:takeover", headers=world.org.headers())
    assert taken.status_code == 200, taken.text
    before = world.conversation()
    run = world.run(status=RunStatus.HANDOFF, text=None)
    await start_notifier()
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(run))
    await eventually(lambda: [n.dedupe_key for n in notifications(world)], lambda k: k == [f"handoff:{run.run_id}"])
    after = world.conversation()
    assert after.status == "handoff"
    assert (after.assigned_user_id, after.handoff_at) == (world.org.admin_user_id, before.handoff_at)


async def test_a_run_that_ends_after_a_person_took_over_sends_nothing_and_its_reply_is_kept(
    world: World, channel: ChannelServer, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    """A run in flight when a person takes the conversation over must not talk over them: its reply
    and what its send tool queued are withheld (kept, marked failed, never sent by a redelivery);
    once the conversation is handed back, the next run's reply is sent."""
    path = f"/api/v1/conversations/{world.conversation_id}"
    in_flight = world.run(text="Claro, já vou verificar.")
    queued = world.queue_intent(in_flight, "Segue o link do pedido.")
    taken = await api.post(f"{path}:takeover", headers=world.org.headers(Role.MANAGER))
    assert taken.status_code == 200, taken.text
    await start_notifier()
    for _ in range(2):  # a redelivery withholds nothing more and sends nothing
        await publish(Topics.RUN_COMPLETED, in_flight)
    await eventually(
        lambda: sorted((d.kind, d.status, d.error_code) for d in world.deliveries(in_flight.run_id)),
        lambda d: (
            d == [("intent", "failed", "conversation_with_humans"), ("reply", "failed", "conversation_with_humans")]
        ),
    )
    listed = await api.get(f"{path}/messages", headers=world.org.headers(Role.MANAGER))
    assert listed.status_code == 200, listed.text
    kept = {m["body"]: m for m in listed.json()["data"] if m["run_id"] == str(in_flight.run_id)}
    assert set(kept) == {"Claro, já vou verificar.", "Segue o link do pedido."}
    assert {(m["delivery_status"], m["delivery_error"]) for m in kept.values()} == {
        ("failed", "conversation_with_humans")
    }
    assert kept["Segue o link do pedido."]["id"] == str(queued)

    back = await api.post(f"{path}:handback", headers=world.org.headers(Role.MANAGER))
    assert back.status_code == 200, back.text
    after = world.run(text="Voltei: posso ajudar?")
    await publish(Topics.RUN_COMPLETED, after)
    await eventually(lambda: [d.status for d in world.deliveries(after.run_id)], lambda s: s == ["sent"])
    assert [s.text for s in channel.received] == ["Voltei: posso ajudar?"]


async def test_a_takeover_asks_the_run_in_flight_to_stop(world: World, api: httpx.AsyncClient) -> None:
    """The run still going when a person takes over gets a steering interrupt, in the takeover's
    own transaction (outbox): it stops at its next step instead of spending on a reply nobody
    will send. A takeover with no run going asks nothing."""
    path = f"/api/v1/conversations/{world.conversation_id}"
    finished = world.run(text="Respondido.")
    going = world.run(status=RunStatus.RUNNING, text=None)
    taken = await api.post(f"{path}:takeover", headers=world.org.headers(Role.MANAGER))
    assert taken.status_code == 200, taken.text
    serde = Serde.from_settings(KafkaSettings())
    with tenant_session(world.org) as session:
        payloads = session.scalars(
            select(OutboxEvent.payload).where(
                OutboxEvent.topic == Topics.STEERING.name, OutboxEvent.key == str(world.conversation_id).encode()
            )
        ).all()
        details = session.scalars(
            select(AuditLogEntry.details).where(AuditLogEntry.target_id == str(world.conversation_id))
        ).all()
    [interrupt] = [serde.decode(Topics.STEERING, bytes(p)) for p in payloads]
    assert (interrupt.run_id, interrupt.kind) == (going.run_id, SteeringKind.INTERRUPT)
    assert interrupt.run_id != finished.run_id
    assert [d["interrupted_run_id"] for d in details] == [str(going.run_id)]

    with tenant_session(world.org) as session:
        session.execute(update(AiAgentRun).where(AiAgentRun.id == going.run_id).values(status=RunStatus.ABORTED.value))
    again = await api.post(f"{path}:takeover", headers=world.org.headers(Role.MANAGER))
    assert again.status_code == 200
    with tenant_session(world.org) as session:
        steering = session.scalars(
            select(OutboxEvent.id).where(
                OutboxEvent.topic == Topics.STEERING.name, OutboxEvent.key == str(world.conversation_id).encode()
            )
        ).all()
    assert len(steering) == 1, "no run going: nothing asked to stop"


async def test_a_run_that_ends_after_a_takeover_and_a_handback_still_sends_nothing(
    world: World, channel: ChannelServer, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    """A person took over while the run was going, answered, and handed back before the run's
    outcome came: the conversation is open again, but the run's reply answers what the person
    answered already. Withheld; a run started after the handback is sent."""
    path = f"/api/v1/conversations/{world.conversation_id}"
    manager = world.org.headers(Role.MANAGER)
    in_flight = world.run(text="Claro, já vou verificar.")
    assert (await api.post(f"{path}:takeover", headers=manager)).status_code == 200
    assert (await api.post(f"{path}/messages", json={"text": "Oi, aqui é a Ana."}, headers=manager)).status_code == 202
    assert (await api.post(f"{path}:handback", headers=manager)).status_code == 200
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, in_flight)
    await eventually(
        lambda: [(d.status, d.error_code) for d in world.deliveries(in_flight.run_id)],
        lambda d: d == [("failed", "conversation_with_humans")],
    )
    after = world.run(text="Posso ajudar em algo mais?")
    await publish(Topics.RUN_COMPLETED, after)
    await eventually(lambda: [d.status for d in world.deliveries(after.run_id)], lambda s: s == ["sent"])
    agent_texts = [s.text for s in channel.received if s.text != "Oi, aqui é a Ana."]
    assert agent_texts == ["Posso ajudar em algo mais?"]


async def test_a_handoff_that_arrives_after_a_takeover_and_handback_leaves_the_conversation_open(
    world: World, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    """The run asked for a person, but its handoff reached the notifier after a person had taken
    the conversation over and handed it back: the handback is the newer word (the dispatcher
    decides the same), so the conversation stays with the agents."""
    path = f"/api/v1/conversations/{world.conversation_id}"
    manager = world.org.headers(Role.MANAGER)
    asked = world.run(status=RunStatus.HANDOFF, text=None)
    assert (await api.post(f"{path}:takeover", headers=manager)).status_code == 200
    assert (await api.post(f"{path}:handback", headers=manager)).status_code == 200
    await start_notifier()
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(asked))
    await eventually(
        lambda: [n.event_type for n in notifications(world)], lambda types: "conversation.handoff" in types
    )
    conversation = world.conversation()
    assert (conversation.status, conversation.assigned_user_id) == ("open", None)

    later = world.run(status=RunStatus.HANDOFF, text=None)  # a new run asks again: that one counts
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(later))
    await eventually(lambda: world.conversation().status, lambda status: status == "handoff")


async def test_a_reply_the_channel_refused_is_announced_once_a_delivered_or_withheld_one_is_not(
    world: World,
    channel: ChannelServer,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    publish: Publish,
    start_notifier: Start,
) -> None:
    """``completed`` is not "delivered": a reply WAHA refused leaves its customer waiting, and only
    the run table knew. The org's webhook hears of it once (a redelivery announces nothing more)."""
    secret = await set_webhook(api, world, receiver.url)
    channel.fail_next(400)
    refused, delivered = world.run(text="Seu pedido saiu."), world.run(text="Obrigado!")
    await start_notifier()
    for run in (refused, delivered, refused):  # `refused` redelivered
        await publish(Topics.RUN_COMPLETED, run)
    await eventually(lambda: [d.status for d in world.deliveries(delivered.run_id)], lambda s: s == ["sent"])
    await eventually(lambda: len(receiver.hits), lambda n: n == 1)
    (hit,) = receiver.hits
    assert verify(secret, hit.headers, hit.body)
    event = hit.json()
    [reply] = world.outbound(refused.run_id)
    assert event["type"] == "message.undelivered"
    assert event["data"] == {
        "message_id": str(reply.id),
        "kind": "reply",
        "run_id": str(refused.run_id),
        "conversation_id": str(world.conversation_id),
        "contact_id": str(world.contact_id),
        "channel_session_id": str(world.channel_id),
        "outcome": "failed",
        "error_code": "http_400",
        "attempts": 1,
    }
    assert "Seu pedido" not in hit.body.decode(), "never the message's text"

    # People took the conversation over: the reply is withheld on purpose, nobody needs telling.
    taken = await api.post(f"/api/v1/conversations/{world.conversation_id}:takeover", headers=world.org.headers())
    assert taken.status_code == 200, taken.text
    withheld = world.run(text="Já vou verificar.")
    await publish(Topics.RUN_COMPLETED, withheld)
    await eventually(lambda: [d.status for d in world.deliveries(withheld.run_id)], lambda s: s == ["failed"])
    assert [n.event_type for n in notifications(world)] == ["message.undelivered"]
