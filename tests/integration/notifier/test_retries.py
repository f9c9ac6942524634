"""Retries off the consume path (services/notifier/retries.py): a failing channel delays only its own
messages, a retried reply is still sent once, and a claim a crashed notifier left mid-retry becomes
``unknown`` by the sweep — never sent again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, update

from scripts.channel_server import ChannelServer
from services.api.runs_live.service import partition_of
from services.notifier.settings import NotifierSettings
from switchboard.contracts import Record, Topics, TopicSpec
from switchboard.crypto import KeyRing
from switchboard.db.enums import Role
from switchboard.db.models import ChannelSession
from switchboard.settings import KafkaSettings
from tests.integration.api.test_webhook import message_event
from tests.integration.notifier.conftest import API_KEY, RunningNotifier, World, eventually
from tests.integration.notifier.test_handoff import notifications
from tests.integration.notifier.test_phone_takeover import send, webhook_channel
from tests.support.agents import tenant_session
from tests.support.api import create_org
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]


def _statuses(world: World, run_id: Any) -> list[str]:
    return [d.status for d in world.deliveries(run_id)]


@pytest.fixture
async def second_channel() -> AsyncIterator[ChannelServer]:
    server = await ChannelServer(api_key=API_KEY).start()
    yield server
    await server.stop()


def _same_partition_world(
    stack: StackEndpoints, keyring: KeyRing, channel_url: str, like: World, partitions: int
) -> World:
    """Another org's conversation whose records share ``like``'s partition (keys are conversation ids)."""
    target = partition_of(like.conversation_id, partitions)
    for _ in range(64):
        world = World(create_org(stack.database_url), keyring, channel_url)
        if partition_of(world.conversation_id, partitions) == target:
            return world
    raise AssertionError("no conversation landed on the same partition")


def _patient(settings: NotifierSettings, **overrides: Any) -> NotifierSettings:
    """Many attempts, short backoffs: a failing channel keeps being retried during the test."""
    return settings.model_copy(
        update={"send_max_attempts": 40, "send_backoff_initial_s": 0.1, "send_backoff_max_s": 0.3, **overrides}
    )


async def _retrying_one_reply(
    settings: NotifierSettings, keyring: KeyRing, world: World, channel: ChannelServer, publish: Publish
) -> tuple[RunningNotifier, Any]:
    """A notifier retrying one reply in the background (its channel answers 503 until recovered)."""
    channel.fail_next(503, times=1000)
    notifier = await RunningNotifier(settings, keyring).wait_ready()
    stuck = world.run()
    await publish(Topics.RUN_COMPLETED, stuck)
    await channel.wait_for(2, timeout=20)  # the first attempt and a background retry
    return notifier, stuck


async def test_a_failing_channel_never_delays_another_conversations_reply(
    stack: StackEndpoints,
    keyring: KeyRing,
    topics: KafkaSettings,
    world: World,
    channel: ChannelServer,
    second_channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    other = _same_partition_world(stack, keyring, second_channel.url, world, topics.conversation_partitions)
    channel.fail_next(503, times=1000)  # the first org's WAHA is down
    notifier = await RunningNotifier(_patient(notifier_settings), keyring).wait_ready()
    try:
        stuck = world.run(text="for the org whose channel is down")
        await publish(Topics.RUN_COMPLETED, stuck)
        await channel.wait_for(1, timeout=20)  # its first attempt failed
        fine = other.run(text="for the org whose channel works")
        await publish(Topics.RUN_COMPLETED, fine)  # the next record of the same partition

        await eventually(lambda: _statuses(other, fine.run_id), lambda s: s == ["sent"])
        assert _statuses(world, stuck.run_id) == ["sending"], "the failing reply is still being retried"
        assert [s.text for s in second_channel.delivered] == ["for the org whose channel works"]

        channel.recover()
        [delivery] = await eventually(
            lambda: world.deliveries(stuck.run_id), lambda d: [x.status for x in d] == ["sent"]
        )
        assert delivery.attempts == len(channel.received) >= 2
        assert [s.text for s in channel.delivered] == ["for the org whose channel is down"]
    finally:
        await notifier.stop()


async def test_a_claim_left_mid_retry_by_a_crash_becomes_unknown_and_is_never_resent(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    first, stuck = await _retrying_one_reply(_patient(notifier_settings), keyring, world, channel, publish)
    await first.crash()  # the record's offset was committed: no redelivery will find the claim
    attempts_before = len(channel.received)
    # A kill records nothing and sends nothing more: no grace in which the retry runs on (it once
    # exhausted its attempts while the consumer shut down, and the reply ended ``failed``).
    assert _statuses(world, stuck.run_id) == ["sending"]
    channel.recover()
    await asyncio.sleep(0.5)  # longer than the retry's backoff: an abandoned retry would have sent by now
    assert len(channel.received) == attempts_before

    sweeping = _patient(notifier_settings, stale_claim_s=1.0, sweep_interval_s=0.2)
    second = await RunningNotifier(sweeping, keyring).wait_ready()
    try:
        [delivery] = await eventually(
            lambda: world.deliveries(stuck.run_id), lambda d: [x.status for x in d] == ["unknown"]
        )
        assert delivery.error_code == "interrupted"
        [message] = world.outbound(stuck.run_id)
        assert message.delivery_status == "unknown", "the inbox says so too (it stayed pending)"
        marker = world.run(text="marker")
        await publish(Topics.RUN_COMPLETED, marker)
        await eventually(lambda: _statuses(world, marker.run_id), lambda s: s == ["sent"])
        assert len(channel.received) == attempts_before + 1, "only the marker was sent after the crash"
        assert channel.delivered[-1].text == "marker"
    finally:
        await second.stop()


async def test_a_graceful_stop_records_retries_still_waiting_as_unknown(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    settings = _patient(notifier_settings, retry_grace_s=0.2)
    notifier, stuck = await _retrying_one_reply(settings, keyring, world, channel, publish)
    await notifier.stop()
    [delivery] = world.deliveries(stuck.run_id)
    assert (delivery.status, delivery.error_code) == ("unknown", "interrupted")
    assert delivery.attempts >= 2
    [message] = world.outbound(stuck.run_id)
    assert message.delivery_status == "unknown"
    # The humans will hear of it: the notice is written with the outcome, for the next notifier's sweep.
    [notice] = [n for n in notifications(world) if n.event_type == "message.undelivered"]
    assert (notice.status, notice.payload["outcome"], notice.payload["message_id"]) == (
        "pending",
        "unknown",
        str(message.id),
    )
    await asyncio.sleep(0.5)
    assert all(s.status_returned == 503 for s in channel.received), "nothing sent after the stop"


@pytest.mark.parametrize(
    ("meanwhile", "error_code"),
    [
        ("a person took the conversation over", "conversation_with_humans"),
        ("the number was archived", "channel_session_archived"),
    ],
)
async def test_a_reply_waiting_for_its_retry_is_not_sent_once_it_may_no_longer_go_out(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
    api: httpx.AsyncClient,
    meanwhile: str,
    error_code: str,
) -> None:
    """The channel is failing; while the reply waits for its next retry a person takes the
    conversation over (an agent would talk over them), or its number is archived (its name on
    the WAHA server may be another session's now: the route read at the claim is not trusted).
    The next retry sends nothing: the reply ends failed with why (not retried on until the
    channel recovers, then sent)."""
    channel.fail_next(503, times=1000)
    notifier = await RunningNotifier(_patient(notifier_settings), keyring).wait_ready()
    try:
        stuck = world.run(text="Já te respondo.")
        await publish(Topics.RUN_COMPLETED, stuck)
        await channel.wait_for(2, timeout=20)  # the first attempt and a background retry failed
        if meanwhile == "the number was archived":
            with tenant_session(world.org) as session:
                archive = update(ChannelSession).where(ChannelSession.id == world.channel_id)
                session.execute(archive.values(archived_at=func.now()))
        else:
            taken = await api.post(
                f"/api/v1/conversations/{world.conversation_id}:takeover", headers=world.org.headers(Role.MANAGER)
            )
            assert taken.status_code == 200, taken.text
        [delivery] = await eventually(
            lambda: world.deliveries(stuck.run_id), lambda d: [x.status for x in d] == ["failed"]
        )
        assert delivery.error_code == error_code
        attempts = len(channel.received)
        channel.recover()
        await asyncio.sleep(1.0)  # a retry still scheduled would send now
        assert len(channel.received) == attempts and channel.delivered == [], "nothing reached the customer"
        [message] = world.outbound(stuck.run_id)
        assert (message.delivery_status, message.delivery_error) == ("failed", error_code)
    finally:
        await notifier.stop()


async def test_a_send_the_channel_made_before_failing_is_recorded_sent_from_its_echo_not_sent_again(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    api: httpx.AsyncClient,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    """WAHA sent the reply, then answered 500 (or its answer never came): WhatsApp has no idempotency
    key, so a blind retry would give the customer the reply twice. The retry waits for the channel's
    ``message.any`` echo (ingested by the real API, which gives the reply its channel id) and records
    the reply sent from it instead of sending it again."""
    line = await webhook_channel(world, api)
    channel.fail_next_after_sending(500)
    notifier = await RunningNotifier(_patient(notifier_settings, send_echo_wait_s=3.0), keyring).wait_ready()
    try:
        reply = world.run(text="Seu pedido saiu hoje.")
        await publish(Topics.RUN_COMPLETED, reply)
        [sent] = await channel.wait_for(1, timeout=20)
        echo = message_event(line, chat=world.chat_id, body=sent.text, from_me=True, event="message.any")
        echoed = await send(api, line, world.chat_id, sent.text, from_me=True, event=echo)
        assert echoed["reason"] == "echo"

        [delivery] = await eventually(
            lambda: world.deliveries(reply.run_id), lambda d: [x.status for x in d] == ["sent"]
        )
        assert delivery.external_id == echo["payload"]["id"]
        assert delivery.attempts == 1
        await asyncio.sleep(0.5)
        assert [s.text for s in channel.received] == ["Seu pedido saiu hoje."], "sent once, never again"
    finally:
        await notifier.stop()


async def test_a_server_error_without_an_echo_is_still_retried(
    keyring: KeyRing, world: World, channel: ChannelServer, notifier_settings: NotifierSettings, publish: Publish
) -> None:
    """No echo came (the channel did not send it, or its session reports no ``message.any``): the
    retry sends, after at least the echo wait — the reply is not given up for a doubt."""
    channel.fail_next(500)
    notifier = await RunningNotifier(_patient(notifier_settings, send_echo_wait_s=0.5), keyring).wait_ready()
    try:
        reply = world.run(text="Chega amanhã.")
        await publish(Topics.RUN_COMPLETED, reply)
        [delivery] = await eventually(
            lambda: world.deliveries(reply.run_id), lambda d: [x.status for x in d] == ["sent"]
        )
        assert delivery.attempts == 2
        first, second = channel.received
        assert (first.status_returned, second.status_returned) == (500, 201)
        assert (second.received_at - first.received_at).total_seconds() >= 0.5
    finally:
        await notifier.stop()


async def test_a_queued_message_retried_in_the_background_still_goes_out_before_the_reply(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    """The channel refused the run's queued message for a moment (503): the reply waits behind its
    retry, so the customer reads the payment link before "anything else?", as the run wrote them."""
    completed = world.run(text="Mais alguma coisa?")
    world.queue_intent(completed, "Aqui está o link de pagamento.")
    channel.fail_next(503)
    notifier = await RunningNotifier(_patient(notifier_settings), keyring).wait_ready()
    try:
        await publish(Topics.RUN_COMPLETED, completed)
        await eventually(lambda: sorted(_statuses(world, completed.run_id)), lambda s: s == ["sent", "sent"])
    finally:
        await notifier.stop()
    assert [(s.text, s.status_returned) for s in channel.received] == [
        ("Aqui está o link de pagamento.", 503),
        ("Aqui está o link de pagamento.", 201),
        ("Mais alguma coisa?", 201),
    ]


def _by_kind(world: World, run_id: Any) -> dict[str, tuple[str, str | None]]:
    return {d.kind: (d.status, d.error_code) for d in world.deliveries(run_id)}


async def _retrying_a_queued_message(
    settings: NotifierSettings, keyring: KeyRing, world: World, channel: ChannelServer, publish: Publish
) -> tuple[RunningNotifier, Any]:
    """A notifier retrying a run's queued message, its reply waiting behind it (``claimed``)."""
    completed = world.run(text="Mais alguma coisa?")
    world.queue_intent(completed, "Aqui está o link de pagamento.")
    channel.fail_next(503, times=1000)
    notifier = await RunningNotifier(settings, keyring).wait_ready()
    await publish(Topics.RUN_COMPLETED, completed)
    await channel.wait_for(2, timeout=20)
    assert _by_kind(world, completed.run_id) == {"intent": ("sending", None), "reply": ("claimed", None)}
    return notifier, completed


async def test_a_stop_during_a_retry_records_the_messages_waiting_behind_it(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    """A graceful stop while the queued message is still being retried: it is recorded ``unknown``
    (an attempt may have gone out), and the reply waiting behind it — never attempted — ``failed``
    with ``interrupted_before_send``: certainly not sent, never sent later, and the humans hear of it."""
    settings = _patient(notifier_settings, retry_grace_s=0.2)
    notifier, completed = await _retrying_a_queued_message(settings, keyring, world, channel, publish)
    await notifier.stop()
    assert _by_kind(world, completed.run_id) == {
        "intent": ("unknown", "interrupted"),
        "reply": ("failed", "interrupted_before_send"),
    }
    assert [s.text for s in channel.received if s.text == "Mais alguma coisa?"] == [], "the reply never went"
    reply = next(m for m in world.outbound(completed.run_id) if m.body == "Mais alguma coisa?")
    assert (reply.delivery_status, reply.delivery_error) == ("failed", "interrupted_before_send")
    outcomes = {n.payload["message_id"]: n.payload["outcome"] for n in notifications(world)}
    assert outcomes[str(reply.id)] == "failed", "people are told the reply did not go, and may send it"


async def test_a_crash_during_a_retry_leaves_the_reply_behind_it_to_the_sweep_as_not_sent(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    """A kill while the queued message is retried: its offset was committed, no redelivery comes.
    The sweep marks the message on the wire ``unknown`` and the reply that waited behind it —
    never attempted — ``failed`` (``interrupted_before_send``); it stayed ``sending`` and became
    ``unknown`` before, as if it might have gone out."""
    notifier, completed = await _retrying_a_queued_message(
        _patient(notifier_settings), keyring, world, channel, publish
    )
    await notifier.crash()
    channel.recover()
    sweeping = _patient(notifier_settings, stale_claim_s=1.0, sweep_interval_s=0.2)
    second = await RunningNotifier(sweeping, keyring).wait_ready()
    try:
        await eventually(
            lambda: _by_kind(world, completed.run_id),
            lambda d: d == {"intent": ("unknown", "interrupted"), "reply": ("failed", "interrupted_before_send")},
        )
    finally:
        await second.stop()
    statuses = {m.body: m.delivery_status for m in world.outbound(completed.run_id)}
    assert statuses == {"Aqui está o link de pagamento.": "unknown", "Mais alguma coisa?": "failed"}
    assert [s.text for s in channel.received if s.text == "Mais alguma coisa?"] == [], "the reply never went"


async def test_a_message_waiting_behind_a_long_retry_is_not_taken_for_a_crashed_ones(
    keyring: KeyRing,
    world: World,
    channel: ChannelServer,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    """Retries chain in a long outage, and a message waiting behind them outlived the sweep's stale
    age: a live notifier's own sweep failed it as interrupted (never sent, nobody told), as if its
    notifier had crashed. Each attempt of the retry ahead of it now says it is still waiting."""
    settings = _patient(notifier_settings, stale_claim_s=1.0, sweep_interval_s=0.2)
    completed = world.run(text="Mais alguma coisa?")
    world.queue_intent(completed, "Aqui está o link de pagamento.")
    channel.fail_next(503, times=1000)
    notifier = await RunningNotifier(settings, keyring).wait_ready()
    try:
        await publish(Topics.RUN_COMPLETED, completed)
        await channel.wait_for(2, timeout=20)
        await asyncio.sleep(2.5)  # the outage outlasts the stale age
        assert _by_kind(world, completed.run_id)["reply"] == ("claimed", None), "still waiting, not swept"
        channel.recover()
        await eventually(lambda: _by_kind(world, completed.run_id)["reply"], lambda d: d == ("sent", None))
    finally:
        await notifier.stop()
    assert [s.text for s in channel.delivered] == ["Aqui está o link de pagamento.", "Mais alguma coisa?"]
