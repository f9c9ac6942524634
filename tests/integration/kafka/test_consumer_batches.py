"""The shared consumer's batch mode: one call per partition batch, record by record on failure."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence

import pytest
from aiokafka import AIOKafkaProducer

from switchboard.contracts import RunStarted, Topics
from switchboard.kafka.consumer import ErrorPolicy, Inbound, RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
from switchboard.observability.metrics import RECORDS_DEAD_LETTERED
from switchboard.settings import KafkaSettings

from .test_consumer_error_policy import _dead_letters, _run_started

pytestmark = pytest.mark.integration


async def test_batches_are_handled_in_one_call_and_a_bad_record_falls_back_to_one_by_one(
    topics: KafkaSettings, group_id: str
) -> None:
    conversation = uuid.uuid4()
    records = [_run_started().model_copy(update={"conversation_id": conversation}) for _ in range(6)]
    poison = records[3]
    name = Topics.RUN_STARTED.physical_name(topics)
    async with RecordProducer(topics, service="test") as producer:
        for record in records[:3]:
            await producer.send(Topics.RUN_STARTED, record)
        raw = AIOKafkaProducer(bootstrap_servers=topics.bootstrap_servers)
        await raw.start()
        await raw.send_and_wait(name, b"\x07not avro", key=str(conversation).encode())
        await raw.stop()
        for record in records[3:]:
            await producer.send(Topics.RUN_STARTED, record)

    calls: list[int] = []
    handled: list[uuid.UUID] = []
    lettered = {
        code: RECORDS_DEAD_LETTERED.labels("test-batches", Topics.RUN_STARTED.name, code)
        for code in ("bad_magic_byte", "handler_failed")
    }
    lettered_before = {code: counter._value.get() for code, counter in lettered.items()}

    async def batch_handler(batch: Sequence[Inbound]) -> None:
        calls.append(len(batch))
        values: list[RunStarted] = [i.value for i in batch]
        if any(v.event_id == poison.event_id for v in values):
            raise RuntimeError("one bad row fails the whole transaction")
        handled.extend(v.event_id for v in values)

    async with RecordProducer(topics, service="test-batches") as dlq:
        consumer = RecordConsumer(
            service="test-batches",
            kafka=topics,
            topics=[Topics.RUN_STARTED],
            group_id=group_id,
            batch_handler=batch_handler,
            dead_letters=DeadLetterPublisher(dlq, service="test-batches", consumer_group=group_id),
            policy=ErrorPolicy(max_attempts=2, initial_backoff_s=0.01),
        )
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        for _ in range(200):
            if len(handled) >= 5:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(task, 30)

    assert sorted(handled) == sorted(r.event_id for r in records if r is not poison)
    assert max(calls) > 1, "healthy batches go in one call"
    codes = sorted(letter.error_code for letter in await _dead_letters(topics, 2))
    assert codes == ["bad_magic_byte", "handler_failed"]
    # What an operator alerts on (switchboard_records_dead_lettered_total), once per letter.
    assert {code: counter._value.get() - lettered_before[code] for code, counter in lettered.items()} == {
        "bad_magic_byte": 1,
        "handler_failed": 1,
    }


def test_exactly_one_handler_kind() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        RecordConsumer(service="x", kafka=KafkaSettings(), topics=[], group_id="g", dead_letters=None)  # type: ignore[arg-type]


async def test_across_partitions_one_call_takes_every_partition_and_commits_each(
    topics: KafkaSettings, group_id: str
) -> None:
    """``across_partitions``: what one fetch returned from several partitions is one handler call,
    and every partition's offset is committed (a consumer of the same group starts after them)."""
    records = [_run_started().model_copy(update={"conversation_id": uuid.uuid4()}) for _ in range(24)]
    async with RecordProducer(topics, service="test") as producer:
        for record in records:
            await producer.send(Topics.RUN_STARTED, record)

    calls: list[set[int]] = []
    handled: list[uuid.UUID] = []

    async def batch_handler(batch: Sequence[Inbound]) -> None:
        calls.append({i.partition for i in batch})
        handled.extend(i.value.event_id for i in batch)

    async def consume(handler: Callable[[Sequence[Inbound]], Awaitable[None]], until: int, patience_s: float) -> None:
        async with RecordProducer(topics, service="test-across") as dlq:
            consumer = RecordConsumer(
                service="test-across",
                kafka=topics,
                topics=[Topics.RUN_STARTED],
                group_id=group_id,
                batch_handler=handler,
                dead_letters=DeadLetterPublisher(dlq, service="test-across", consumer_group=group_id),
                # The broker holds the fetch until every record is there: one fetch, all partitions.
                consumer_options={"fetch_max_wait_ms": 1000, "fetch_min_bytes": 1_000_000},
                across_partitions=True,
            )
            stop = asyncio.Event()
            task = asyncio.create_task(consumer.run(stop))
            for _ in range(int(patience_s / 0.05)):
                if len(handled) >= until:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, 30)

    await consume(batch_handler, len(records), 10.0)
    assert sorted(handled) == sorted(r.event_id for r in records)
    assert max(len(c) for c in calls) > 1, "one call held records of several partitions"

    again: list[uuid.UUID] = []

    async def second(batch: Sequence[Inbound]) -> None:
        again.extend(i.value.event_id for i in batch)

    await consume(second, len(records) + 1, 2.0)  # nothing new: every partition's offset was committed
    assert again == []


async def test_concurrent_partitions_go_side_by_side_each_in_order(topics: KafkaSettings, group_id: str) -> None:
    """``concurrent_partitions``: the partitions of a fetch are handled at the same time (a handler
    waiting on I/O does not hold the others up), each partition's records still in offset order,
    and every partition's offset is committed."""
    records = [_run_started().model_copy(update={"conversation_id": uuid.uuid4()}) for _ in range(30)]
    async with RecordProducer(topics, service="test") as producer:
        for record in records:
            await producer.send(Topics.RUN_STARTED, record)

    seen: dict[int, list[int]] = {}
    in_flight = 0
    most_at_once = 0
    handled: list[uuid.UUID] = []

    async def handler(inbound: Inbound) -> None:
        nonlocal in_flight, most_at_once
        in_flight += 1
        most_at_once = max(most_at_once, in_flight)
        await asyncio.sleep(0.02)  # a send to a channel
        in_flight -= 1
        seen.setdefault(inbound.partition, []).append(inbound.offset)
        handled.append(inbound.value.event_id)

    async def consume(until: int, patience_s: float) -> None:
        async with RecordProducer(topics, service="test-concurrent") as dlq:
            consumer = RecordConsumer(
                service="test-concurrent",
                kafka=topics,
                topics=[Topics.RUN_STARTED],
                group_id=group_id,
                handler=handler,
                dead_letters=DeadLetterPublisher(dlq, service="test-concurrent", consumer_group=group_id),
                consumer_options={"fetch_max_wait_ms": 1000, "fetch_min_bytes": 1_000_000},
                concurrent_partitions=True,
            )
            stop = asyncio.Event()
            task = asyncio.create_task(consumer.run(stop))
            for _ in range(int(patience_s / 0.05)):
                if len(handled) >= until:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, 30)

    await consume(len(records), 15.0)
    assert sorted(handled) == sorted(r.event_id for r in records)
    assert len(seen) > 1 and most_at_once > 1, "partitions were handled side by side"
    assert all(offsets == sorted(offsets) for offsets in seen.values()), "each partition in offset order"
    await consume(len(records) + 1, 2.0)
    assert len(handled) == len(records), "every partition's offset was committed"


async def test_a_consumer_is_ready_only_once_its_group_gave_it_partitions(topics: KafkaSettings, group_id: str) -> None:
    """Readiness (``/readyz``, ``make demo``): not while the group join is under way, only after it."""

    async def handler(_: Inbound) -> None:
        return None

    async with RecordProducer(topics, service="test-ready") as dlq:
        consumer = RecordConsumer(
            service="test-ready",
            kafka=topics,
            topics=[Topics.RUN_STARTED],
            group_id=group_id,
            handler=handler,
            dead_letters=DeadLetterPublisher(dlq, service="test-ready", consumer_group=group_id),
        )
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        try:
            while consumer._consumer is None:  # the moment the client exists, before any join
                await asyncio.sleep(0)
            assert not await consumer.ready(), "ready before the group join"
            for _ in range(600):
                if await consumer.ready():
                    break
                await asyncio.sleep(0.05)
            assert await consumer.ready()
            assert consumer._consumer is not None and consumer._consumer.assignment()
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
