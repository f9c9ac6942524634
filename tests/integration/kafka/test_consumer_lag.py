"""``switchboard_consumer_lag`` tells the truth when it matters (switchboard/kafka/lag.py): a
consumer paused by back-pressure shows its backlog growing, and a partition the group hands to
another member stops being reported by the one that lost it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

import pytest
from prometheus_client import REGISTRY

from switchboard.contracts import Topics
from switchboard.kafka.consumer import ErrorPolicy, Inbound, RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings

from .test_consumer_error_policy import _run_started

pytestmark = pytest.mark.integration


class NoRoom:
    """Back-pressure that never lifts: the consumer stays paused (the runner at its limit)."""

    def room(self) -> int:
        return 0

    async def wait_for_room(self, timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)


def _lag_series(service: str, topic: str) -> dict[str, float]:
    """Partition -> lag of ``service`` on ``topic``, as /metrics would show it."""
    found: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name != "switchboard_consumer_lag":
            continue
        for sample in metric.samples:
            if sample.labels.get("service") == service and sample.labels.get("topic") == topic:
                found[sample.labels["partition"]] = sample.value
    return found


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


def _consumer(
    topics: KafkaSettings, group_id: str, service: str, producer: RecordProducer, **options: object
) -> RecordConsumer:
    async def handler(_: Sequence[Inbound]) -> None:
        return None

    return RecordConsumer(
        service=service,
        kafka=topics,
        topics=[Topics.RUN_STARTED],
        group_id=group_id,
        batch_handler=handler,
        dead_letters=DeadLetterPublisher(producer, service=service, consumer_group=group_id),
        lag_refresh_s=0.2,
        **options,  # type: ignore[arg-type]
    )


async def test_a_paused_consumer_shows_its_backlog_growing(topics: KafkaSettings, group_id: str) -> None:
    service = f"test-lag-paused-{uuid.uuid4().hex[:6]}"
    topic = Topics.RUN_STARTED.physical_name(topics)
    conversation = uuid.uuid4()
    async with RecordProducer(topics, service="test") as producer:
        consumer = _consumer(topics, group_id, service, producer, flow=NoRoom())
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        try:
            await _until(lambda: consumer._join.joined.is_set(), "the consumer never joined")
            for _ in range(5):
                await producer.send(
                    Topics.RUN_STARTED, _run_started().model_copy(update={"conversation_id": conversation})
                )
            await _until(lambda: sum(_lag_series(service, topic).values()) == 5, "the backlog never showed")
            for _ in range(3):
                await producer.send(
                    Topics.RUN_STARTED, _run_started().model_copy(update={"conversation_id": conversation})
                )
            await _until(lambda: sum(_lag_series(service, topic).values()) == 8, "the gauge froze")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    assert _lag_series(service, topic) == {}, "a stopped consumer reports nothing"


async def test_a_partition_given_to_another_member_is_no_longer_reported_by_the_first(
    topics: KafkaSettings, group_id: str
) -> None:
    first, second = (f"test-lag-{name}-{uuid.uuid4().hex[:6]}" for name in ("first", "second"))
    topic = Topics.RUN_STARTED.physical_name(topics)
    partitions = topics.conversation_partitions
    assert partitions > 1, "a rebalance needs partitions to share"
    async with RecordProducer(topics, service="test") as producer:
        stop = asyncio.Event()
        alone = _consumer(topics, group_id, first, producer)
        tasks = [asyncio.create_task(alone.run(stop))]
        try:
            await _until(lambda: len(_lag_series(first, topic)) == partitions, "the first member reports all")
            joining = _consumer(topics, group_id, second, producer)
            tasks.append(asyncio.create_task(joining.run(stop)))
            await _until(
                lambda: (
                    len(_lag_series(first, topic)) + len(_lag_series(second, topic)) == partitions
                    and len(_lag_series(second, topic)) > 0
                ),
                "after the rebalance each partition is reported by exactly one member",
            )
            assert not set(_lag_series(first, topic)) & set(_lag_series(second, topic))
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)


async def test_a_partition_held_by_a_retry_shows_its_backlog_growing(topics: KafkaSettings, group_id: str) -> None:
    """The database is down: the record is retried in place (never dead-lettered), and the lag of
    what waits behind it keeps growing on the gauge while the retry waits — alerts see the stall."""
    service = f"test-lag-retry-{uuid.uuid4().hex[:6]}"
    topic = Topics.RUN_STARTED.physical_name(topics)
    conversation = uuid.uuid4()

    async def down(_: Inbound) -> None:
        raise ConnectionError("the database is restarting")

    async with RecordProducer(topics, service="test") as producer:
        consumer = RecordConsumer(
            service=service,
            kafka=topics,
            topics=[Topics.RUN_STARTED],
            group_id=group_id,
            handler=down,
            dead_letters=DeadLetterPublisher(producer, service=service, consumer_group=group_id),
            policy=ErrorPolicy(max_attempts=2, initial_backoff_s=0.3, max_backoff_s=0.3),
            lag_refresh_s=0.2,
            consumer_options={"max_poll_records": 1},
        )
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        try:
            await _until(lambda: consumer._join.joined.is_set(), "the consumer never joined")
            await producer.send(Topics.RUN_STARTED, _run_started().model_copy(update={"conversation_id": conversation}))
            await asyncio.sleep(1.0)  # it is retrying the first record now
            for _ in range(6):
                await producer.send(
                    Topics.RUN_STARTED, _run_started().model_copy(update={"conversation_id": conversation})
                )
            await _until(lambda: sum(_lag_series(service, topic).values()) >= 6, "the gauge froze during the retry")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
