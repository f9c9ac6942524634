"""The shared consumer: bad records are dead-lettered with their error, the loop goes on."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from sqlalchemy.exc import OperationalError

from switchboard.contracts import DeadLetter, RunStarted, Serde, Topics
from switchboard.kafka.consumer import Inbound
from switchboard.kafka.errors import PermanentRecordError
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.support.consumers import FAST_RETRIES, consume_run_started_until
from tests.support.samples import realistic_records

pytestmark = pytest.mark.integration


def _run_started() -> RunStarted:
    """A distinct run_started record (own event id and conversation)."""
    sample = next(r for r in realistic_records() if isinstance(r, RunStarted))
    return sample.model_copy(update={"event_id": uuid.uuid4(), "conversation_id": uuid.uuid4()})


async def _dead_letters(settings: KafkaSettings, expected: int, timeout_s: float = 20) -> list[DeadLetter]:
    serde = Serde.from_settings(settings)
    consumer = AIOKafkaConsumer(
        Topics.DEAD_LETTER.physical_name(settings),
        bootstrap_servers=settings.bootstrap_servers,
        group_id=f"dlq-reader-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    letters: list[DeadLetter] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(letters) < expected and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            letters.extend(serde.decode(Topics.DEAD_LETTER, r.value) for rs in batch.values() for r in rs)
    finally:
        await consumer.stop()
    return letters


async def test_undecodable_and_failing_records_are_dead_lettered_and_the_next_is_processed(
    topics: KafkaSettings, group_id: str
) -> None:
    # One conversation, so one partition, in this order: garbage, a record whose handler fails, a good one.
    poison = _run_started()
    good = _run_started().model_copy(update={"conversation_id": poison.conversation_id})
    key = str(poison.conversation_id).encode()
    name = Topics.RUN_STARTED.physical_name(topics)
    raw = AIOKafkaProducer(bootstrap_servers=topics.bootstrap_servers)
    await raw.start()
    try:
        garbage = await raw.send_and_wait(name, b"\x07not avro at all", key=key)
    finally:
        await raw.stop()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, poison)
        await producer.send(Topics.RUN_STARTED, good)

    handled: list[uuid.UUID] = []
    attempts: dict[uuid.UUID, int] = {}

    async def handler(inbound: Inbound) -> None:
        record: RunStarted = inbound.value
        attempts[record.event_id] = attempts.get(record.event_id, 0) + 1
        if record.event_id == poison.event_id:
            raise RuntimeError("database said no")
        handled.append(record.event_id)

    await consume_run_started_until(topics, group_id, handler, done=lambda: good.event_id in handled)

    assert handled == [good.event_id]
    assert attempts[poison.event_id] == FAST_RETRIES.max_attempts, "retried per policy before dead-lettering"
    letters = {letter.error_code: letter for letter in await _dead_letters(topics, 2)}
    assert set(letters) == {"bad_magic_byte", "handler_failed"}
    undecodable = letters["bad_magic_byte"]
    assert undecodable.original_value == b"\x07not avro at all"
    assert undecodable.original_key == key
    assert undecodable.original_topic == name
    assert (undecodable.original_partition, undecodable.original_offset) == (garbage.partition, garbage.offset)
    assert undecodable.consumer_group == group_id and undecodable.service == "test-consumer"
    failed = letters["handler_failed"]
    assert "database said no" in failed.error_message
    assert failed.attempts == FAST_RETRIES.max_attempts
    assert failed.original_key == str(poison.conversation_id).encode()
    assert Serde.from_settings(topics).decode(Topics.RUN_STARTED, failed.original_value) == poison


async def test_permanent_errors_skip_retries_and_offsets_are_committed(topics: KafkaSettings, group_id: str) -> None:
    rejected = _run_started()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, rejected)
    calls = 0

    async def handler(inbound: Inbound) -> None:
        nonlocal calls
        calls += 1
        raise PermanentRecordError("unknown_org", "organization does not exist")

    await consume_run_started_until(topics, group_id, handler, done=lambda: calls >= 1)
    letters = await _dead_letters(topics, 1)
    assert calls == 1
    assert [(letter.error_code, letter.attempts) for letter in letters] == [("unknown_org", 1)]

    # The same group resumes after the dead-lettered record: it is not handed out again.
    seen_again: list[Inbound] = []

    async def second_handler(inbound: Inbound) -> None:
        seen_again.append(inbound)

    marker = _run_started()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, marker)
    await consume_run_started_until(topics, group_id, second_handler, done=lambda: len(seen_again) >= 1)
    assert [inbound.value.event_id for inbound in seen_again] == [marker.event_id]


async def test_a_handler_that_recovers_is_not_dead_lettered(topics: KafkaSettings, group_id: str) -> None:
    flaky = _run_started()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, flaky)
    calls = 0
    done = asyncio.Event()

    async def handler(inbound: Inbound) -> None:
        nonlocal calls
        calls += 1
        if calls < 2:
            raise ConnectionError("transient")
        done.set()

    await consume_run_started_until(topics, group_id, handler, done=done.is_set)
    assert calls == 2
    assert await _dead_letters(topics, 1, timeout_s=2) == []


async def test_a_database_outage_waits_in_place_and_dead_letters_nothing(topics: KafkaSettings, group_id: str) -> None:
    """The database restarts (its connections fail for longer than the retries' few attempts): the
    record is a good one, so it waits for the database instead of going to the dead-letter topic —
    dead-lettered with its offset committed, a reply was lost — and the next one follows it in order."""
    first = _run_started()
    second = _run_started().model_copy(update={"conversation_id": first.conversation_id})
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, first)
        await producer.send(Topics.RUN_STARTED, second)
    handled: list[uuid.UUID] = []
    failures = 0

    async def handler(inbound: Inbound) -> None:
        nonlocal failures
        record: RunStarted = inbound.value
        if record.event_id == first.event_id and failures < 4 * FAST_RETRIES.max_attempts:
            failures += 1
            raise OperationalError("SELECT 1", {}, Exception("connection refused: the server is restarting"))
        handled.append(record.event_id)

    await consume_run_started_until(topics, group_id, handler, done=lambda: second.event_id in handled)
    assert handled == [first.event_id, second.event_id], "handled once it healed, in order"
    assert await _dead_letters(topics, 1, timeout_s=2) == []


async def test_a_record_too_large_to_dead_letter_whole_goes_without_its_bytes(
    topics: KafkaSettings, group_id: str
) -> None:
    """An undecodable record just under the broker's limit: its letter (the bytes plus the wrapping)
    is over it. Retried as is, it wedged the partition for good; it goes without the bytes (they
    stay on the topic, at the offset the letter names) and the next record is processed."""
    big = b"\x01" + bytes(1_048_350)
    good = _run_started()
    key = str(good.conversation_id).encode()
    name = Topics.RUN_STARTED.physical_name(topics)
    raw = AIOKafkaProducer(bootstrap_servers=topics.bootstrap_servers, max_request_size=1_100_000)
    await raw.start()
    try:
        sent = await raw.send_and_wait(name, big, key=key)
    finally:
        await raw.stop()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, good)
    handled: list[uuid.UUID] = []

    async def handler(inbound: Inbound) -> None:
        handled.append(inbound.value.event_id)

    await consume_run_started_until(topics, group_id, handler, done=lambda: good.event_id in handled)
    assert handled == [good.event_id]
    [letter] = await _dead_letters(topics, 1)
    assert letter.original_value is None and (letter.original_partition, letter.original_offset) == (
        sent.partition,
        sent.offset,
    )
