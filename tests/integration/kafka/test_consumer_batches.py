"""The shared consumer's batch mode: one call per partition batch, record by record on failure."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaProducer

from switchboard.contracts import RunStarted, Topics
from switchboard.kafka.consumer import ErrorPolicy, Inbound, RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
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


def test_exactly_one_handler_kind() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        RecordConsumer(service="x", kafka=KafkaSettings(), topics=[], group_id="g", dead_letters=None)  # type: ignore[arg-type]
