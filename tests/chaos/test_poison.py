"""Issue 8 §3 poison: malformed records on every consumed topic are dead-lettered and processing goes on.

Three poisons on every partition of every topic a service consumes (so whatever partition
the next valid message lands on, the poison is ahead of it): garbage bytes (no Avro
frame), a well-framed body under a schema id nobody registered, and a valid envelope
(right magic byte, the topic's schema id, a well-formed Avro body) whose ``org_id`` is
not a UUID. Then one customer message through the webhook must still be answered.

``published`` and ``steering`` are read whole by every process of their service, without a
consumer group, so by design they log and skip a poison instead of dead-lettering it once
per process (services/dispatcher/published_feed.py, services/runner/steering.py): for them
the test checks the log line and that processing goes on.
"""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from fastavro import schemaless_writer

from switchboard.contracts import DeadLetter, Record, Serde, Topics, TopicSpec
from switchboard.contracts.serde import frame
from tests.chaos.conftest import Pipeline
from tests.chaos.observe import Reply, read_replies, read_topic
from tests.chaos.workload import SendLog, chat_ids, send_one
from tests.support.samples import realistic_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

# Topic -> the services that consume it through a group (RecordConsumer / the faust stream): each
# must dead-letter every poison once, under its own service name.
DEAD_LETTERED: dict[TopicSpec[Any], frozenset[str]] = {
    Topics.DISPATCH_REQUESTED: frozenset({"dispatcher"}),
    Topics.RUN_STARTED: frozenset({"dispatcher"}),
    Topics.RUN_HEARTBEATS: frozenset({"dispatcher"}),
    Topics.DISPATCHER_TICKS: frozenset({"dispatcher"}),
    Topics.RUN_COMPLETED: frozenset({"dispatcher", "notifier", "brief"}),
    Topics.RUN_REQUESTED: frozenset({"runner"}),
    Topics.HANDOFF_TRIGGERED: frozenset({"notifier", "brief"}),
    Topics.INSIGHTS: frozenset({"notifier", "brief"}),
    Topics.DISPATCH_DECISIONS: frozenset({"dispatcher-sink"}),
}
# Topic -> (the process that reads it whole, the line it logs for each poison it skips).
SKIPPED: dict[TopicSpec[Any], tuple[str, str]] = {
    Topics.PUBLISHED: ("dispatcher", "undecodable published record skipped"),
    Topics.STEERING: ("runner", "undecodable steering record skipped"),
}
UNREGISTERED_SCHEMA_ID = 987_654
# The stable code each poison is dead-lettered with (switchboard.contracts ContractErrorCode).
ERROR_CODES = {
    "garbage": "bad_magic_byte",
    "unregistered schema id": "unknown_schema_id",
    "bad field": "undecodable_body",
}
Location = tuple[str, int, int]  # physical topic, partition, offset


def poisons(serde: Serde, topic: TopicSpec[Any]) -> dict[str, bytes]:
    """The three malformed values for ``topic``."""
    sample: Record = next(r for r in realistic_records() if type(r) is topic.record_type)
    datum = sample.model_dump()
    datum["org_id"] = "not-a-uuid"
    _, parsed = serde.current_schema(topic)
    body = io.BytesIO()
    schemaless_writer(body, parsed, datum)
    return {
        "garbage": b"\xde\xad\xbe\xef this is not an avro record",
        "unregistered schema id": frame(UNREGISTERED_SCHEMA_ID, body.getvalue()),
        "bad field": frame(serde.schema_id(topic), body.getvalue()),
    }


async def inject(pipeline: Pipeline) -> dict[Location, tuple[TopicSpec[Any], str, bytes]]:
    """Every poison on every partition of every consumed topic; where each landed."""
    kafka = pipeline.kafka
    serde = Serde.from_settings(kafka)
    landed: dict[Location, tuple[TopicSpec[Any], str, bytes]] = {}
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for topic in (*DEAD_LETTERED, *SKIPPED):
            name = topic.physical_name(kafka)
            for kind, value in poisons(serde, topic).items():
                for partition in range(topic.partition_count(kafka)):
                    key = str(uuid.uuid4()).encode()
                    meta = await producer.send_and_wait(name, value, key=key, partition=partition)
                    landed[(name, meta.partition, meta.offset)] = (topic, kind, value)
    finally:
        await producer.stop()
    return landed


async def dead_letters_until(
    pipeline: Pipeline, expected: dict[Location, frozenset[str]], timeout_s: float
) -> dict[Location, list[DeadLetter]]:
    """(topic, partition, offset) -> its dead letters, once every expected service wrote one (or timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen: dict[Location, list[DeadLetter]] = {}
        letters: list[DeadLetter] = await read_topic(pipeline.kafka, Topics.DEAD_LETTER)
        for letter in letters:
            location = (letter.original_topic, letter.original_partition, letter.original_offset)
            seen.setdefault(location, []).append(letter)
        if all(services <= services_of(seen, where) for where, services in expected.items()):
            return seen
        if time.monotonic() > deadline:
            return seen
        await asyncio.sleep(1.0)


def services_of(seen: dict[Location, list[DeadLetter]], where: Location) -> set[str]:
    return {letter.service for letter in seen.get(where, [])}


def log_count(pipeline: Pipeline, process: str, line: str) -> int:
    return pipeline.group.procs[process].log_path.read_text(errors="replace").count(line)


async def test_poison_on_every_consumed_topic_is_dead_lettered_and_the_next_message_is_answered(
    pipeline: Pipeline,
) -> None:
    landed = await inject(pipeline)
    expected = {where: DEAD_LETTERED[topic] for where, (topic, _, _) in landed.items() if topic in DEAD_LETTERED}
    seen = await dead_letters_until(pipeline, expected, timeout_s=90)

    missing = {
        f"{where} ({landed[where][1]}): expected {sorted(services)}, got {sorted(services_of(seen, where))}"
        for where, services in expected.items()
        if not services <= services_of(seen, where)
    }
    assert not missing, sorted(missing)[:10]
    # Each dead letter keeps the original bytes (to inspect and replay) and says why, with a stable code.
    for where in expected:
        _, kind, value = landed[where]
        for letter in seen[where]:
            assert letter.original_value == value
            assert letter.error_code == ERROR_CODES[kind], (where, letter.service, letter.error_code)
    print(f"{len(landed)} poison records, {sum(len(v) for v in seen.values())} dead letters")
    for topic, (process, line) in SKIPPED.items():
        poisoned = sum(1 for t, _, _ in landed.values() if t is topic)
        assert log_count(pipeline, process, line) >= poisoned, f"{topic.name}: {process} did not log every skip"

    # Processing goes on: every service alive, and a customer message behind the poison is answered once.
    exited = {name: p.popen.returncode for name, p in pipeline.group.procs.items() if p.popen.poll() is not None}
    assert not exited
    [chat] = chat_ids(1)
    async with httpx.AsyncClient(base_url=pipeline.topology.api_url, timeout=30) as api:
        assert await send_one(api, pipeline.org, chat, "Oi, ainda estão aí depois do veneno?", SendLog())
    deadline = time.monotonic() + 60
    replies: list[Reply] = []
    while time.monotonic() < deadline and not replies:
        replies = [r for r in await read_replies(pipeline.channel_url) if r.chat_id == chat and r.status == 201]
        await asyncio.sleep(0.3)
    await asyncio.sleep(2.0)  # an extra (doubled) reply would arrive by now
    replies = [r for r in await read_replies(pipeline.channel_url) if r.chat_id == chat and r.status == 201]
    assert len(replies) == 1 and replies[0].text.startswith("chaos reply #"), replies
