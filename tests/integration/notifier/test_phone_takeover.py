"""The business answers from its own phone: a person took the conversation over (docs/api.md).

The real API (webhook, group commit) and the real notifier, on the real database and broker:
a message typed on the business phone stops the agents in that conversation — the run in
flight is asked to stop and its reply withheld, the customer's next message is not
dispatched — and ``/handback`` typed on the phone gives the conversation back.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from sqlalchemy import func, select, text, update

from scripts.channel_server import ChannelServer
from services.notifier.metrics import MESSAGES_DELIVERED
from switchboard.contracts import DispatchRequested, RunStatus, Serde, Topics, WakeReason
from switchboard.contracts.enums import SteeringKind
from switchboard.db.models import Conversation, Message, OutboxEvent
from switchboard.db.models.audit import AuditLogEntry
from switchboard.settings import KafkaSettings
from tests.integration.api.test_webhook import Channel, deliver, encode, message_event
from tests.integration.notifier.conftest import RunningNotifier, World, eventually
from tests.support.agents import tenant_session

Publish = Callable[..., Awaitable[None]]
Start = Callable[..., Awaitable[RunningNotifier]]
SERDE = Serde.from_settings(KafkaSettings())


async def webhook_channel(world: World, api: httpx.AsyncClient) -> Channel:
    """The world's channel session with a webhook secret (rotated through the API: shown once)."""
    rotated = await api.post(f"/api/v1/channel-sessions/{world.channel_id}:rotate-secret", headers=world.org.headers())
    assert rotated.status_code == 200, rotated.text
    return Channel(
        org=world.org, id=world.channel_id, name=world.session_name, secret=rotated.json()["data"]["webhook_secret"]
    )


async def send(
    api: httpx.AsyncClient,
    channel: Channel,
    chat: str,
    body: str,
    *,
    from_me: bool,
    event: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Deliver a signed WAHA message event (``event``: that very delivery again, as WAHA retries)."""
    event = event or message_event(
        channel, chat=chat, body=body, from_me=from_me, event="message.any" if from_me else "message"
    )
    response = await deliver(api, encode(event), channel.secret, session_id=channel.id)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def outbox(world: World, topic: Any) -> list[Any]:
    with tenant_session(world.org) as session:
        payloads = session.scalars(
            select(OutboxEvent.payload)
            .where(OutboxEvent.topic == topic.name, OutboxEvent.key == str(world.conversation_id).encode())
            .order_by(OutboxEvent.id)
        ).all()
    return [SERDE.decode(topic, bytes(p)) for p in payloads]


def conversation(world: World) -> Conversation:
    with tenant_session(world.org) as session:
        row = session.get(Conversation, world.conversation_id)
        assert row is not None
        session.expunge(row)
        return row


async def test_a_reply_typed_on_the_business_phone_stops_the_agents_until_handback_from_the_phone(
    world: World, channel: ChannelServer, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    line = await webhook_channel(world, api)
    in_flight = world.run(text="Claro, já vou verificar.")
    going = world.run(status=RunStatus.RUNNING, text=None)

    typed = await send(api, line, world.chat_id, "Oi, aqui é a Ana da loja. Já resolvo.", from_me=True)

    assert (typed["dispatched"], typed["reason"]) == (False, "owner_took_over")
    taken = conversation(world)
    assert (taken.status, taken.assigned_user_id) == ("handoff", None)
    [interrupt] = outbox(world, Topics.STEERING)
    assert (interrupt.run_id, interrupt.kind) == (going.run_id, SteeringKind.INTERRUPT)
    with tenant_session(world.org) as session:
        audit = session.execute(
            select(
                AuditLogEntry.action, AuditLogEntry.actor_user_id, AuditLogEntry.actor_ref, AuditLogEntry.details
            ).where(AuditLogEntry.target_id == str(world.conversation_id))
        ).all()
    assert [(a.action, a.actor_user_id, a.actor_ref, a.details["via"]) for a in audit] == [
        ("conversation.taken_over", None, "business_phone", "business_phone")
    ]

    # The run that was answering finishes now: its reply would talk over Ana, so it is withheld.
    withheld = MESSAGES_DELIVERED.labels("none", "reply", "withheld")
    withheld_before = withheld._value.get()
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, in_flight)
    await eventually(
        lambda: [(d.status, d.error_code) for d in world.deliveries(in_flight.run_id)],
        lambda d: d == [("failed", "conversation_with_humans")],
    )
    await eventually(lambda: withheld._value.get() - withheld_before, lambda n: n == 1)
    # The customer answers Ana: stored, not dispatched (the agents stay out).
    answered = await send(api, line, world.chat_id, "Obrigado, Ana!", from_me=False)
    assert (answered["dispatched"], answered["reason"]) == (False, "human_handoff")
    assert outbox(world, Topics.DISPATCH_REQUESTED) == []

    # Ana gives the chat back from the phone: reopened, the agents woken; the command is no message.
    handback = message_event(line, chat=world.chat_id, body="/handback", from_me=True, event="message.any")
    back = await send(api, line, world.chat_id, "", from_me=True, event=handback)
    assert (back["dispatched"], back["reason"], back["message_id"]) == (False, "slash_handback", None)
    reopened = conversation(world)
    assert reopened.status == "open"
    [wake] = outbox(world, Topics.DISPATCH_REQUESTED)
    assert isinstance(wake, DispatchRequested) and wake.wake_reason is WakeReason.ASSIGNMENT
    again = await send(api, line, world.chat_id, "/handback", from_me=True)
    assert (again["reason"], again["duplicate"]) == ("slash_handback_nothing", True)
    assert len(outbox(world, Topics.DISPATCH_REQUESTED)) == 1
    with tenant_session(world.org) as session:
        bodies = session.scalars(select(Message.body).where(Message.conversation_id == world.conversation_id)).all()
    assert "/handback" not in bodies

    after = world.run(text="Posso ajudar em algo mais?")
    await publish(Topics.RUN_COMPLETED, after)
    await eventually(lambda: [d.status for d in world.deliveries(after.run_id)], lambda s: s == ["sent"])
    assert [s.text for s in channel.received] == ["Posso ajudar em algo mais?"]

    # Ana steps in again; then WAHA retries the old /handback delivery (its answer was lost): it is
    # the same command, already done, and must not take the chat from her a second time.
    retaken = await send(api, line, world.chat_id, "Ana de novo: deixa comigo.", from_me=True)
    assert retaken["reason"] == "owner_took_over"
    redelivered = await send(api, line, world.chat_id, "", from_me=True, event=handback)
    assert (redelivered["reason"], redelivered["duplicate"]) == ("slash_handback_nothing", True)
    assert conversation(world).status == "handoff"


async def test_a_number_other_tools_send_through_can_turn_the_phone_takeover_off(
    world: World, api: httpx.AsyncClient
) -> None:
    """``owner_replies_take_over: false``: a booking reminder sent through the same number is stored,
    and the agents keep the conversation. A customer's ``/handback`` is an ordinary message."""
    line = await webhook_channel(world, api)
    path = f"/api/v1/channel-sessions/{world.channel_id}"
    assert (await api.get(path, headers=world.org.headers())).json()["data"]["owner_replies_take_over"] is True
    patched = await api.patch(path, json={"owner_replies_take_over": False}, headers=world.org.headers())
    assert patched.status_code == 200, patched.text
    assert patched.json()["data"]["owner_replies_take_over"] is False
    refused = await api.patch(path, json={"owner_replies_take_over": None}, headers=world.org.headers())
    assert refused.status_code == 422

    reminder = await send(api, line, world.chat_id, "Lembrete: sua consulta é amanhã às 10h.", from_me=True)
    assert (reminder["dispatched"], reminder["reason"]) == (False, "from_me")
    assert conversation(world).status == "open"
    assert outbox(world, Topics.STEERING) == []

    customer = await send(api, line, world.chat_id, "/handback", from_me=False)
    assert customer["dispatched"] is True
    [dispatch] = outbox(world, Topics.DISPATCH_REQUESTED)
    assert dispatch.message is not None and dispatch.message.text == "/handback"
    assert uuid.UUID(customer["message_id"]) == dispatch.message.message_id


async def test_a_second_copy_of_our_own_reply_is_not_a_person_taking_over(
    world: World, channel: ChannelServer, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    """The channel delivered our reply twice (a send retried after its answer was lost; WhatsApp has
    no idempotency key), and its copy — with an id of its own, matching no unsent row — comes back
    as an own message; so may an echo of a send tool's message written long before the run's end.
    Both repeat a recent send: stored, and the agents keep the conversation."""
    line = await webhook_channel(world, api)
    await start_notifier()
    reply = world.run(text="Seu pedido saiu hoje.")
    await publish(Topics.RUN_COMPLETED, reply)
    await eventually(lambda: [d.status for d in world.deliveries(reply.run_id)], lambda s: s == ["sent"])
    [delivery] = world.deliveries(reply.run_id)
    with tenant_session(world.org) as session:  # written 20 minutes before it was sent (a long run's send tool)
        session.execute(
            update(Message)
            .where(Message.id == delivery.message_id)
            .values(occurred_at=func.now() - text("interval '20 minutes'"))
        )

    copy = await send(api, line, world.chat_id, "Seu pedido saiu hoje.\n", from_me=True)

    assert (copy["dispatched"], copy["reason"]) == (False, "from_me")
    assert conversation(world).status == "open"
    assert outbox(world, Topics.STEERING) == []
    typed = await send(api, line, world.chat_id, "Oi, aqui é a Ana.", from_me=True)
    assert typed["reason"] == "owner_took_over", "a text we did not send is still a person"


async def test_the_echo_of_an_agents_reply_that_reads_like_a_command_runs_no_command(
    world: World, channel: ChannelServer, api: httpx.AsyncClient, publish: Publish, start_notifier: Start
) -> None:
    """A customer asks the agent to write exactly "/compact" (or "/handback"): WAHA echoes the reply
    as the number's own message, and it must be recognised as the platform's echo — not run as
    the owner's billed summarization or hand-back — whether the echo comes before the send's
    answer gave the row its channel id, or after."""
    line = await webhook_channel(world, api)
    await start_notifier()
    replied = world.run(text="/compact")
    await publish(Topics.RUN_COMPLETED, replied)
    await eventually(lambda: [d.status for d in world.deliveries(replied.run_id)], lambda s: s == ["sent"])
    [reply] = world.outbound(replied.run_id)
    assert reply.external_id is not None
    # After the answer: the echo carries the id the row already has.
    late = message_event(
        line, message_id=reply.external_id, chat=world.chat_id, body="/compact", from_me=True, event="message.any"
    )
    echoed = await send(api, line, world.chat_id, "", from_me=True, event=late)
    assert (echoed["reason"], echoed["message_id"]) == ("echo", str(reply.id))

    # Before the answer: the row has no channel id yet (a queued message of a run still sending).
    queued = world.run(text=None)
    queued_id = world.queue_intent(queued, "/handback")
    early = message_event(line, chat=world.chat_id, body="/handback", from_me=True, event="message.any")
    echoed = await send(api, line, world.chat_id, "", from_me=True, event=early)
    assert (echoed["reason"], echoed["message_id"]) == ("echo", str(queued_id))

    assert outbox(world, Topics.RUN_REQUESTED) == [], "no summarization run was requested"
    assert conversation(world).status == "open"


async def test_a_message_that_certainly_never_went_out_typed_on_the_phone_is_the_owners(
    world: World, channel: ChannelServer, api: httpx.AsyncClient
) -> None:
    """The notifier failed a queued message before any attempt (``interrupted_before_send``: people
    may send it again). The owner re-types it on the business phone: that is their own message —
    taken for our echo, it vanished into the failed row and the agents kept answering."""
    line = await webhook_channel(world, api)
    completed = world.run(text=None)
    never_sent = world.queue_intent(completed, "Seu pedido saiu para entrega.")
    with tenant_session(world.org) as session:
        session.execute(
            update(Message)
            .where(Message.id == never_sent)
            .values(delivery_status="failed", delivery_error="interrupted_before_send")
        )
    typed = await send(api, line, world.chat_id, "Seu pedido saiu para entrega.", from_me=True)
    assert typed["reason"] == "owner_took_over" and typed["message_id"] != str(never_sent)
    assert conversation(world).status == "handoff"
