"""Every topic's contract survives a real broker, and conversations stay co-partitioned."""

from __future__ import annotations

import struct
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from switchboard.contracts import (
    CatalogRegistry,
    Record,
    Serde,
    Topics,
    TopicSpec,
    all_topics,
    conversation_topics,
    topic_for_record,
)
from switchboard.contracts.schemas import schemas_dir
from switchboard.kafka import admin
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.support.samples import realistic_records

pytestmark = pytest.mark.integration


async def _read_all(settings: KafkaSettings, topic: TopicSpec[Record], expected: int) -> list:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        name = topic.physical_name(settings)
        partitions = [TopicPartition(name, p) for p in range(topic.partition_count(settings))]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records: list = []
        for _ in range(40):
            batch = await consumer.getmany(timeout_ms=250)
            records.extend(r for rs in batch.values() for r in rs)
            if len(records) >= expected:
                break
        return records
    finally:
        await consumer.stop()


def test_every_registered_topic_has_a_sample() -> None:
    sampled = {topic_for_record(type(r)).name for r in realistic_records()}
    assert sampled == {t.name for t in all_topics()}


@pytest.mark.parametrize("record", realistic_records(), ids=lambda r: type(r).__name__)
async def test_record_round_trips_through_the_broker(topics: KafkaSettings, record: Record) -> None:
    topic = topic_for_record(type(record))
    catalog = CatalogRegistry(schemas_dir())
    async with RecordProducer(topics, service="test") as producer:
        metadata = await producer.send(topic, record)
    consumed = await _read_all(topics, topic, 1)
    assert len(consumed) == 1
    raw = consumed[0]
    assert (raw.partition, raw.offset) == (metadata.partition, metadata.offset)
    assert raw.value[0] == 0, "Confluent wire format: magic byte 0"
    (schema_id,) = struct.unpack(">I", raw.value[1:5])
    assert catalog.schema_by_id(schema_id) is not None
    assert Serde(catalog).decode(topic, raw.value) == record


async def test_one_conversation_lands_on_one_partition_number_across_topics(topics: KafkaSettings) -> None:
    samples = {topic_for_record(type(r)).name: r for r in realistic_records()}
    conversations = [uuid.uuid4() for _ in range(12)]
    placements: dict[uuid.UUID, set[int]] = {c: set() for c in conversations}
    async with RecordProducer(topics, service="test") as producer:
        for topic in conversation_topics():
            assert topic.partition_count(topics) == topics.conversation_partitions
            for conversation in conversations:
                record = samples[topic.name].model_copy(update={"conversation_id": conversation})
                metadata = await producer.send(topic, record)
                placements[conversation].add(metadata.partition)
    assert all(len(partitions) == 1 for partitions in placements.values()), placements
    assert len({next(iter(p)) for p in placements.values()}) > 1, "keys should spread over partitions"


async def test_topics_create_is_idempotent_and_checks_partition_counts(kafka_settings: KafkaSettings) -> None:
    created = await admin.ensure_topics(kafka_settings)
    assert sorted(created) == sorted(t.physical_name(kafka_settings) for t in all_topics())
    try:
        assert await admin.ensure_topics(kafka_settings) == []
        listing = {t["topic"]: t for t in await admin.describe_topics(kafka_settings)}
        run_completed = listing[Topics.RUN_COMPLETED.physical_name(kafka_settings)]
        assert run_completed["on_broker"] == kafka_settings.conversation_partitions
        wider = kafka_settings.model_copy(
            update={"conversation_partitions": kafka_settings.conversation_partitions + 1}
        )
        with pytest.raises(admin.TopicShapeError):
            await admin.ensure_topics(wider)
    finally:
        await admin.delete_topics(kafka_settings)


async def test_send_many_placed_says_where_each_record_landed(topics: KafkaSettings) -> None:
    """The dispatcher's run-queue check compares these positions with the runners' committed
    offsets: a position off by one would call a taken request queued (or the reverse)."""
    topic = Topics.DISPATCHER_TICKS
    name = topic.physical_name(topics)
    keys = [str(uuid.uuid4()).encode() for _ in range(30)]  # several partitions, several per partition
    async with RecordProducer(topics, service="test") as producer:
        futures, placements = await producer.send_many_placed(
            [(name, key, b"value-%d" % i) for i, key in enumerate(keys)]
        )
        for future in futures:
            await future
    assert len(placements) == len(keys)
    landed = {(r.partition, r.offset): (r.key, r.value) for r in await _read_all(topics, topic, len(keys))}
    for i, (key, placement) in enumerate(zip(keys, placements, strict=True)):
        position = placement.position()
        assert position is not None
        assert landed[position] == (key, b"value-%d" % i)
    assert len({p.position() for p in placements}) == len(keys)
