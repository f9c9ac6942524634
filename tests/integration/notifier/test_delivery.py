"""Replies reach the customer at most once: redelivery, restarts, retries and refusals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import func, update

from scripts.channel_server import ChannelServer
from services.notifier.handlers import Hooks
from services.notifier.metrics import MESSAGES_DELIVERED
from services.notifier.settings import NotifierSettings
from services.notifier.store import Claimed, NotifierStore
from switchboard.contracts import Insight, InsightKind, Record, RunStatus, Topics, TopicSpec
from switchboard.contracts.enums import InsightStatus
from switchboard.crypto import KeyRing
from switchboard.db.enums import Role
from switchboard.db.models import ChannelSession, Conversation, Message
from switchboard.db.session import create_async_engine, create_async_sessionmaker
from tests.integration.notifier.conftest import RunningNotifier, World, eventually
from tests.support.agents import tenant_session
from tests.support.api import create_org
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]
Start = Callable[..., Awaitable[RunningNotifier]]


def _statuses(world: World, run_id: Any) -> list[str]:
    return [d.status for d in world.deliveries(run_id)]


async def test_redelivered_run_completed_sends_once(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    completed = world.run()
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, completed)
    await publish(Topics.RUN_COMPLETED, completed)  # the same event again (a producer retry, a replay)

    sent = await channel.wait_for(1, timeout=20)
    await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["sent"])
    # The second copy was handled too (the marker run below proves the partition moved past it).
    marker = world.run(text="marker")
    await publish(Topics.RUN_COMPLETED, marker)
    await eventually(lambda: _statuses(world, marker.run_id), lambda s: s == ["sent"])

    texts = [s.text for s in channel.received]
    assert texts == ["Olá! Posso ajudar.", "marker"]
    assert sent[0].chat_id == world.chat_id and sent[0].session == world.session_name
    [reply] = world.outbound(completed.run_id)
    assert reply.direction == "outbound" and reply.delivery_status == "sent"
    assert reply.external_id is not None and reply.external_id.startswith("true_")


async def test_restart_between_send_and_ack_does_not_resend(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """The process dies after the channel accepted the reply but before anything was recorded or acked."""
    completed = world.run()
    hang = asyncio.Event()

    async def stall_after_send(_: Claimed) -> None:
        await hang.wait()  # never set: the crash happens here

    first = await start_notifier(Hooks(after_send=stall_after_send))
    await publish(Topics.RUN_COMPLETED, completed)
    await channel.wait_for(1, timeout=20)
    await first.crash()

    await start_notifier()  # same group: the record comes back (its offset was never committed)
    await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["unknown"])
    marker = world.run(text="marker")
    await publish(Topics.RUN_COMPLETED, marker)
    await eventually(lambda: _statuses(world, marker.run_id), lambda s: s == ["sent"])
    assert [s.text for s in channel.received] == ["Olá! Posso ajudar.", "marker"]


async def test_a_receipt_ingested_during_the_send_is_not_moved_back_by_its_answer(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """WAHA may deliver the reply's receipt (``message.ack``: delivered) before the send's own answer is
    recorded. The answer says only "sent": the receipt is the channel's word and stays."""
    completed = world.run()

    async def receipt_arrives(claimed: Claimed) -> None:
        with tenant_session(world.org) as session:  # what ingest's message.ack did meanwhile
            session.execute(update(Message).where(Message.id == claimed.message_id).values(delivery_status="delivered"))

    await start_notifier(Hooks(after_send=receipt_arrives))
    await publish(Topics.RUN_COMPLETED, completed)

    await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["sent"])
    [reply] = world.outbound(completed.run_id)
    assert reply.delivery_status == "delivered"
    assert reply.external_id is not None and reply.external_id.startswith("true_")  # the answer's id


async def _crash_after_claiming(world: World, publish: Publish, start_notifier: Start) -> Any:
    """A notifier claims a run's reply and dies before sending it; returns the run's record."""
    completed = world.run()
    claimed = asyncio.Event()

    async def stall_after_claim(_: Claimed) -> None:
        claimed.set()
        await asyncio.Event().wait()

    first = await start_notifier(Hooks(after_claim=stall_after_claim))
    await publish(Topics.RUN_COMPLETED, completed)
    await asyncio.wait_for(claimed.wait(), 20)
    await first.crash()
    return completed


async def test_restart_after_claim_before_send_never_sends(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """At most once: a claim without a known outcome is never sent by the next process."""
    completed = await _crash_after_claiming(world, publish, start_notifier)

    await start_notifier()
    await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["unknown"])
    assert channel.received == []
    assert [m.delivery_status for m in world.outbound(completed.run_id)] == ["unknown"], "the inbox says so too"


async def test_a_claim_left_mid_send_is_unknown_at_once_when_redelivered_after_a_takeover(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start, api: httpx.AsyncClient
) -> None:
    """The process died after claiming the reply; a person took the conversation over before the
    redelivery. The claim may have reached the channel: it becomes unknown now (it stayed sending
    until the sweep, minutes later), and nothing is sent."""
    completed = await _crash_after_claiming(world, publish, start_notifier)
    taken = await api.post(
        f"/api/v1/conversations/{world.conversation_id}:takeover", headers=world.org.headers(Role.MANAGER)
    )
    assert taken.status_code == 200, taken.text

    unknown = MESSAGES_DELIVERED.labels("none", "reply", "unknown")
    unknown_before = unknown._value.get()
    await start_notifier()
    await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["unknown"])
    assert [m.delivery_status for m in world.outbound(completed.run_id)] == ["unknown"]
    assert channel.received == []
    # Counted after the commit returns to the notifier, which may be a moment after this test's own
    # connection already sees the row: poll, then make sure a second count does not follow.
    await eventually(lambda: unknown._value.get() - unknown_before, lambda n: n == 1)
    await asyncio.sleep(0.5)
    assert unknown._value.get() - unknown_before == 1, "counted once, when the claim committed"


async def _crash_with_the_first_of_two_on_the_wire(world: World, publish: Publish, start_notifier: Start) -> Any:
    """A run queued a message before its reply; the notifier dies while sending the first of the two."""
    completed = world.run(text="Mais alguma coisa?")
    world.queue_intent(completed, "Aqui está o link de pagamento.")
    on_the_wire = asyncio.Event()

    async def stall_on_the_first(claimed: Claimed) -> None:
        if claimed.kind.value == "intent":
            on_the_wire.set()
            await asyncio.Event().wait()

    first = await start_notifier(Hooks(after_claim=stall_on_the_first))
    await publish(Topics.RUN_COMPLETED, completed)
    await asyncio.wait_for(on_the_wire.wait(), 20)
    statuses = {d.kind: d.status for d in world.deliveries(completed.run_id)}
    assert statuses == {"intent": "sending", "reply": "claimed"}, "only the message on the wire is sending"
    await first.crash()
    return completed


async def test_a_crash_mid_run_leaves_the_messages_not_yet_attempted_to_the_redelivery(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """The first message may have gone out: ``unknown``, never sent again. The reply behind it was
    never attempted: the redelivered record sends it (it became ``unknown`` too, and the customer
    never got an answer)."""
    completed = await _crash_with_the_first_of_two_on_the_wire(world, publish, start_notifier)

    await start_notifier()
    await eventually(
        lambda: {d.kind: d.status for d in world.deliveries(completed.run_id)},
        lambda s: s == {"intent": "unknown", "reply": "sent"},
    )
    assert [s.text for s in channel.received] == ["Mais alguma coisa?"]
    statuses = {m.body: m.delivery_status for m in world.outbound(completed.run_id)}
    assert statuses == {"Aqui está o link de pagamento.": "unknown", "Mais alguma coisa?": "sent"}


async def test_a_message_not_yet_attempted_is_withheld_when_people_took_over_before_the_redelivery(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start, api: httpx.AsyncClient
) -> None:
    completed = await _crash_with_the_first_of_two_on_the_wire(world, publish, start_notifier)
    taken = await api.post(
        f"/api/v1/conversations/{world.conversation_id}:takeover", headers=world.org.headers(Role.MANAGER)
    )
    assert taken.status_code == 200, taken.text

    await start_notifier()
    await eventually(
        lambda: {d.kind: (d.status, d.error_code) for d in world.deliveries(completed.run_id)},
        lambda s: s == {"intent": ("unknown", "interrupted"), "reply": ("failed", "conversation_with_humans")},
    )
    assert channel.received == []


async def test_a_claim_waiting_its_turn_is_sent_by_one_process_only(
    stack: StackEndpoints, world: World, keyring: KeyRing
) -> None:
    """Two processes may hold the same ``claimed`` message (one lost the partition, the other got
    the redelivery): the move to ``sending`` is won once."""
    completed = world.run(text="Mais alguma coisa?")
    world.queue_intent(completed, "Aqui está o link de pagamento.")
    engine = create_async_engine(stack.database_url)
    store = NotifierStore(create_async_sessionmaker(engine), keyring, waha_base_url="http://127.0.0.1:9")
    try:
        first = (await store.claim_run(completed)).claimed
        again = (await store.claim_run(completed)).claimed  # the redelivery: the intent is left unknown
        assert [(c.kind.value, c.started) for c in first] == [("intent", True), ("reply", False)]
        assert [(c.kind.value, c.started) for c in again] == [("reply", False)]
        reply = first[1].message_id
        assert await asyncio.gather(
            store.start_send(world.org.org_id, reply), store.start_send(world.org.org_id, reply)
        ) in ([True, False], [False, True])
        assert {d.kind: d.status for d in world.deliveries(completed.run_id)} == {
            "intent": "unknown",
            "reply": "sending",
        }
    finally:
        await engine.dispose()


async def test_dry_runs_and_handoffs_send_nothing(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    dry = world.run(dry_run=True)
    handoff = world.run(status=RunStatus.HANDOFF, text="Vou chamar um humano")
    intent = world.queue_intent(handoff, "queued before the handoff")
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, dry)
    await publish(Topics.RUN_COMPLETED, handoff)
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(dry, dry_run=True))
    marker = world.run(text="marker")
    await publish(Topics.RUN_COMPLETED, marker)

    await eventually(lambda: _statuses(world, marker.run_id), lambda s: s == ["sent"])
    assert [s.text for s in channel.received] == ["marker"]
    assert world.deliveries(dry.run_id) == [] and world.deliveries(handoff.run_id) == []
    [cancelled] = world.outbound(handoff.run_id)
    assert cancelled.id == intent and cancelled.delivery_status == "failed"
    assert world.conversation().status == "open"  # a dry run's handoff assigns nothing


async def test_503_then_success_delivers_once_after_a_retry(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    channel.fail_next(503)
    completed = world.run()
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, completed)

    [delivery] = await eventually(
        lambda: world.deliveries(completed.run_id), lambda d: [x.status for x in d] == ["sent"]
    )
    assert delivery.attempts == 2
    assert [s.status_returned for s in channel.received] == [503, 201]
    assert len(channel.delivered) == 1


async def test_400_marks_the_run_not_delivered(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    channel.fail_next(400)
    completed = world.run()
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, completed)

    [delivery] = await eventually(
        lambda: world.deliveries(completed.run_id), lambda d: [x.status for x in d] == ["failed"]
    )
    assert delivery.attempts == 1 and delivery.error_code == "http_400"
    assert [s.status_returned for s in channel.received] == [400]  # a permanent refusal is not retried
    [reply] = world.outbound(completed.run_id)
    assert reply.delivery_status == "failed" and reply.delivery_error == "http_400"


async def test_nothing_goes_out_through_an_archived_number(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """Archiving frees the session's name on its WAHA server: a send by name could leave through
    whichever number holds it now. A run that answers afterwards (a follow-up, a wake) fails."""
    with tenant_session(world.org) as session:
        session.execute(
            update(ChannelSession).where(ChannelSession.id == world.channel_id).values(archived_at=func.now())
        )
    completed = world.run()
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, completed)
    [delivery] = await eventually(
        lambda: world.deliveries(completed.run_id), lambda d: [x.status for x in d] == ["failed"]
    )
    assert delivery.error_code == "channel_session_archived"
    assert channel.received == []


async def test_a_number_archived_while_its_route_is_cached_sends_nothing_more(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """The notifier keeps a number's route for ten seconds; the claim itself reads the archive, so
    the reply after an archive fails at once instead of leaving through a name that may be another
    number's now."""
    await start_notifier()
    before = world.run(text="antes")
    await publish(Topics.RUN_COMPLETED, before)
    await eventually(lambda: _statuses(world, before.run_id), lambda s: s == ["sent"])  # the route is cached
    with tenant_session(world.org) as session:
        session.execute(
            update(ChannelSession).where(ChannelSession.id == world.channel_id).values(archived_at=func.now())
        )
    after = world.run(text="depois")
    await publish(Topics.RUN_COMPLETED, after)
    [delivery] = await eventually(lambda: world.deliveries(after.run_id), lambda d: [x.status for x in d] == ["failed"])
    assert delivery.error_code == "channel_session_archived"
    assert [s.text for s in channel.received] == ["antes"]


async def test_queued_intents_are_sent_once_each_before_the_reply(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    completed = world.run(text="E aqui está o resumo.")
    world.queue_intent(completed, "Seu pedido foi confirmado.")
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, completed)
    await publish(Topics.RUN_COMPLETED, completed)

    await eventually(lambda: sorted(_statuses(world, completed.run_id)), lambda s: s == ["sent", "sent"])
    marker = world.run(text="marker")
    await publish(Topics.RUN_COMPLETED, marker)
    await eventually(lambda: _statuses(world, marker.run_id), lambda s: s == ["sent"])
    assert [s.text for s in channel.received] == ["Seu pedido foi confirmado.", "E aqui está o resumo.", "marker"]
    assert {m.delivery_status for m in world.outbound(completed.run_id)} == {"sent"}


def _actioned(completed: Any, status: InsightStatus) -> Insight:
    """The Home item of an approved proposal, as the API republishes it when the owner decides."""
    return Insight(
        org_id=completed.org_id,
        insight_id=uuid.uuid4(),
        insight_key=f"decision:{uuid.uuid4()}",
        insight_date=date(2026, 11, 30),
        kind=InsightKind.PROPOSED_ACTION,
        area="crm",
        title="Approve crm_send_whatsapp_message?",
        body="crm_send_whatsapp_message proposed by the agent",
        status=status,
        run_id=completed.run_id,
        conversation_id=completed.conversation_id,
    )


async def test_an_approved_send_queued_after_the_run_is_delivered_once(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    completed = world.run(text="Vou pedir aprovação para enviar o catálogo.")
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, completed)
    await channel.wait_for(1, timeout=20)
    # The owner approves later: the send tool queues the message on the proposing run, then the
    # decision's Home item goes out as actioned. A message the run queued itself is not the
    # approval's to send (a lost run's: its recovery attempt withdraws it, runner/superseded.py).
    own = world.queue_intent(completed, "Mensagem do próprio run.")
    world.queue_intent(completed, "Aqui está o catálogo.", approved=True)
    await publish(Topics.INSIGHTS, _actioned(completed, InsightStatus.NEW))  # still open: nothing happens
    approved = _actioned(completed, InsightStatus.ACTIONED)
    await publish(Topics.INSIGHTS, approved)
    await publish(Topics.INSIGHTS, approved)  # redelivered
    await eventually(lambda: sorted(_statuses(world, completed.run_id)), lambda s: s == ["sent", "sent"])
    assert [m.delivery_status for m in world.outbound(completed.run_id) if m.id == own] == ["pending"]
    marker = world.run(text="marker")
    await publish(Topics.RUN_COMPLETED, marker)
    await eventually(lambda: _statuses(world, marker.run_id), lambda s: s == ["sent"])
    assert [s.text for s in channel.received] == [
        "Vou pedir aprovação para enviar o catálogo.",
        "Aqui está o catálogo.",
        "marker",
    ]


async def test_a_run_that_fails_does_not_take_its_owners_approval_with_it(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """What the owner approved is the owner's act: it goes out with the approval however the run
    that proposed it ended; the run's own queued message does not."""
    failed = world.run(status=RunStatus.FAILED, text=None)
    own = world.queue_intent(failed, "Mensagem do próprio run.")
    approved_id = world.queue_intent(failed, "Aqui está o catálogo.", approved=True)
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, failed)
    await eventually(
        lambda: {m.id: m.delivery_status for m in world.outbound(failed.run_id)},
        lambda s: s == {own: "failed", approved_id: "pending"},
    )
    await publish(Topics.INSIGHTS, _actioned(failed, InsightStatus.ACTIONED))
    await eventually(lambda: _statuses(world, failed.run_id), lambda s: s == ["sent"])
    assert [s.text for s in channel.received] == ["Aqui está o catálogo."]


async def test_an_owners_approved_send_is_retried_like_a_persons_own_message(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """People own the conversation, and the owner approves a send all the same: the approval is a
    person's decision, sent whatever the takeover — by its retry too (a 503 on the first attempt
    used to end it withheld as ``conversation_with_humans``, a WhatsApp hiccup deciding)."""
    completed = world.run(status=RunStatus.FAILED, text=None)
    approved_id = world.queue_intent(completed, "Aqui está o catálogo.", approved=True)
    with tenant_session(world.org) as session:
        session.execute(
            update(Conversation)
            .where(Conversation.id == world.conversation_id)
            .values(status="handoff", handoff_at=func.now())
        )
    channel.fail_next(503)
    await start_notifier()
    await publish(Topics.INSIGHTS, _actioned(completed, InsightStatus.ACTIONED))
    await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["sent"])
    assert [(s.text, s.status_returned) for s in channel.received] == [
        ("Aqui está o catálogo.", 503),
        ("Aqui está o catálogo.", 201),
    ]
    assert [m.delivery_status for m in world.outbound(completed.run_id) if m.id == approved_id] == ["sent"]


@pytest.mark.parametrize("stored_key", [None, "a-key-the-tenant-stored"])
async def test_a_session_on_the_platforms_waha_is_sent_with_the_operators_key(
    stack: StackEndpoints,
    keyring: KeyRing,
    notifier_settings: NotifierSettings,
    publish: Publish,
    stored_key: str | None,
) -> None:
    """A session without a base_url of its own lives on the platform's WAHA, whose key is the
    operator's (NOTIFIER_WAHA_API_KEY, as API_WAHA_API_KEY for ``:connect``): without it every reply
    was refused 401 and recorded failed; a key a tenant stored is not the one sent there."""
    platform = await ChannelServer(api_key="the-operators-key").start()
    try:
        world = World(create_org(stack.database_url), keyring, None, api_key=stored_key)
        settings = notifier_settings.model_copy(
            update={"waha_base_url": platform.url, "waha_api_key": SecretStr("the-operators-key")}
        )
        notifier = await RunningNotifier(settings, keyring).wait_ready()
        try:
            completed = world.run()
            await publish(Topics.RUN_COMPLETED, completed)
            await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["sent"])
            assert [(s.text, s.status_returned) for s in platform.received] == [("Olá! Posso ajudar.", 201)]
        finally:
            await notifier.stop()
    finally:
        await platform.stop()


async def test_a_reply_in_markdown_reaches_whatsapp_in_its_markup(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    completed = world.run(text="### Seu pedido\n**Status:** enviado\n* rastreio: [aqui](https://t.example/1)")
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, completed)
    [sent] = await channel.wait_for(1, timeout=20)
    assert sent.text == "*Seu pedido*\n*Status:* enviado\n- rastreio: aqui (https://t.example/1)"
    await eventually(lambda: _statuses(world, completed.run_id), lambda s: s == ["sent"])
    [reply] = world.outbound(completed.run_id)
    assert reply.body == completed.final_text, "the inbox keeps the model's text"
