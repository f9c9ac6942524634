"""Org webhook notifications off the consume path (services/notifier/notifications.py): a failing
org webhook delays only its own notifications, and one a crashed notifier left pending is sent
again by the sweep — at least once, with the same event id."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from scripts.channel_server import ChannelServer
from services.notifier.settings import NotifierSettings
from switchboard.contracts import Record, RunStatus, Topics, TopicSpec
from switchboard.crypto import KeyRing
from switchboard.settings import KafkaSettings
from tests.integration.notifier.conftest import RunningNotifier, WebhookReceiver, World, eventually
from tests.integration.notifier.test_handoff import notifications, set_webhook
from tests.integration.notifier.test_retries import _patient, _same_partition_world, _statuses
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]


async def test_a_failing_org_webhook_never_delays_another_conversations_reply(
    stack: StackEndpoints,
    keyring: KeyRing,
    topics: KafkaSettings,
    world: World,
    channel: ChannelServer,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    await set_webhook(api, world, receiver.url)
    receiver.fail_next(503, times=1000)  # the first org's webhook is down
    other = _same_partition_world(stack, keyring, channel.url, world, topics.conversation_partitions)
    notifier = await RunningNotifier(_patient(notifier_settings), keyring).wait_ready()
    try:
        handed = world.run(status=RunStatus.HANDOFF, text="Vou chamar alguém.")
        await publish(Topics.HANDOFF_TRIGGERED, world.handoff(handed))
        await eventually(lambda: len(receiver.hits), lambda n: n >= 1)  # its first attempt failed
        fine = other.run(text="for the org whose channel works")
        await publish(Topics.RUN_COMPLETED, fine)  # the next record of the same partition

        await eventually(lambda: _statuses(other, fine.run_id), lambda s: s == ["sent"])
        assert [n.status for n in notifications(world)] == ["pending"], "the notification is still retried"
        assert world.conversation().status == "handoff", "the handoff itself did not wait for the webhook"

        receiver._failures.clear()  # the webhook is back
        await eventually(lambda: [n.status for n in notifications(world)], lambda s: s == ["sent"])
    finally:
        await notifier.stop()


async def test_a_notification_a_crash_left_pending_is_sent_again_by_the_sweep(
    keyring: KeyRing,
    world: World,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    notifier_settings: NotifierSettings,
    publish: Publish,
) -> None:
    await set_webhook(api, world, receiver.url)
    receiver.fail_next(503, times=1000)
    # No grace at the stop: the crash leaves the send unfinished (with grace its retries could run out).
    first = await RunningNotifier(_patient(notifier_settings, retry_grace_s=0.0), keyring).wait_ready()
    handed = world.run(status=RunStatus.HANDOFF, text="Vou chamar alguém.")
    await publish(Topics.HANDOFF_TRIGGERED, world.handoff(handed))
    await eventually(lambda: len(receiver.hits), lambda n: n >= 1)
    await first.crash()  # the record's offset was committed: no redelivery will find it
    [pending] = notifications(world)
    assert pending.status == "pending"
    receiver._failures.clear()
    tried = len(receiver.hits)

    sweeping = _patient(notifier_settings, stale_claim_s=1.0, sweep_interval_s=0.2)
    second = await RunningNotifier(sweeping, keyring).wait_ready()
    try:
        await eventually(lambda: [n.status for n in notifications(world)], lambda s: s == ["sent"], timeout=30)
        delivered = receiver.hits[tried:]
        assert len(delivered) == 1, "sent again once"
        assert delivered[0].headers["X-Switchboard-Event-Id"] == receiver.hits[0].headers["X-Switchboard-Event-Id"]
        assert delivered[0].json()["type"] == "conversation.handoff"
    finally:
        await second.stop()
