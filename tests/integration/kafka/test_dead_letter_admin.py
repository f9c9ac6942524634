"""Operators list dead letters and replay them, on a real broker, through the shared consumer.

The story: a consumer rejects a record (a bug), it is dead-lettered; the operator lists
it, filters it, fixes the bug and replays it; the same consumer group then handles the
record, byte for byte the original, with the header that says where it came from.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from services.cli import main as cli_main
from switchboard.contracts import DeadLetter, Header, RunStarted, Serde, Topics
from switchboard.kafka import dead_letter_admin as letters
from switchboard.kafka.consumer import Inbound
from switchboard.kafka.errors import PermanentRecordError
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.support.consumers import consume_run_started_until
from tests.support.samples import realistic_records

pytestmark = pytest.mark.integration


def _run_started() -> RunStarted:
    sample = next(r for r in realistic_records() if isinstance(r, RunStarted))
    return sample.model_copy(update={"event_id": uuid.uuid4(), "conversation_id": uuid.uuid4()})


async def _listing_with(settings: KafkaSettings, count: int, selection: letters.LetterFilter) -> letters.Listing:
    """Dead letters are written asynchronously by the consumer: read until they are there."""
    for _ in range(50):
        listing = await letters.read_dead_letters(settings, selection)
        if len(listing.letters) >= count:
            return listing
        await asyncio.sleep(0.2)
    return listing


async def test_a_rejected_record_is_listed_then_replayed_and_handled_by_the_fixed_consumer(
    topics: KafkaSettings, group_id: str
) -> None:
    rejected, passing = _run_started(), _run_started()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, rejected, headers=[("traceparent", b"00-abc-01")])
        await producer.send(Topics.RUN_STARTED, passing)

    bug_fixed = False
    handled: list[Inbound] = []
    refused: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        if inbound.value.event_id == rejected.event_id and not bug_fixed:
            refused.append(inbound)
            raise PermanentRecordError("unknown_org", "organization does not exist")
        handled.append(inbound)

    await consume_run_started_until(topics, group_id, handler, done=lambda: bool(handled and refused))
    assert [i.value.event_id for i in handled] == [passing.event_id]

    listing = await _listing_with(topics, 1, letters.LetterFilter(topic="run_started", error_code="unknown_org"))
    assert len(listing.letters) == 1 and listing.unreadable == []
    stored = listing.letters[0]
    assert stored.letter.original_key == str(rejected.conversation_id).encode()
    assert (await letters.read_dead_letters(topics, letters.LetterFilter(error_code="handler_failed"))).letters == []
    assert (await letters.read_dead_letters(topics, letters.LetterFilter(topic="run_completed"))).letters == []

    dry = await letters.replay(topics, listing.letters, dry_run=True)
    assert dry.replayed == [stored.position] and dry.dry_run

    handled.clear()
    bug_fixed = True
    report = await letters.replay(topics, listing.letters)
    assert report.replayed == [stored.position] and report.skipped == []
    await consume_run_started_until(topics, group_id, handler, done=lambda: len(handled) >= 1)

    assert [i.value.event_id for i in handled] == [rejected.event_id], "the dry run sent nothing; the replay once"
    replayed = handled[0]
    assert replayed.value == rejected
    assert replayed.partition == stored.letter.original_partition
    assert replayed.offset > stored.letter.original_offset
    headers = dict(replayed.headers)
    assert headers[letters.REPLAYED_FROM_HEADER] == str(stored.position).encode()
    assert headers["traceparent"] == b"00-abc-01", "the original headers travel with the replay"


async def test_replay_skips_letters_of_topics_this_deployment_does_not_have(topics: KafkaSettings) -> None:
    foreign = DeadLetter(
        original_topic="another-stack.run_started",
        original_partition=0,
        original_offset=7,
        original_key=b"k",
        original_value=b"\x00poison",
        error_code="bad_magic_byte",
        error_message="no",
        failed_at=_run_started().occurred_at,
        service="other",
        attempts=1,
        original_headers=(Header(key="x", value=b"y"),),
    )
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.DEAD_LETTER, foreign)
    listing = await _listing_with(topics, 1, letters.LetterFilter())
    report = await letters.replay(topics, listing.letters)
    assert report.replayed == []
    assert report.skipped == [(listing.letters[0].position, "unknown_topic")]


async def test_the_cli_lists_filters_and_replays_by_position(
    topics: KafkaSettings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = Topics.RUN_STARTED.physical_name(topics)
    raw = AIOKafkaProducer(bootstrap_servers=topics.bootstrap_servers)
    await raw.start()
    try:
        garbage = await raw.send_and_wait(name, b"\x07not avro", key=b"conv-1")
        # A record on the dead-letter topic that is not a dead letter: reported, not fatal.
        await raw.send_and_wait(Topics.DEAD_LETTER.physical_name(topics), b"junk")
    finally:
        await raw.stop()

    marker = _run_started()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, marker)
    seen: list[uuid.UUID] = []

    async def note(inbound: Inbound) -> None:
        seen.append(inbound.value.event_id)

    await consume_run_started_until(topics, "g-" + uuid.uuid4().hex[:8], note, done=lambda: marker.event_id in seen)
    await _listing_with(topics, 1, letters.LetterFilter(error_code="bad_magic_byte"))

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", topics.bootstrap_servers)
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", topics.topic_prefix)
    monkeypatch.setenv("KAFKA_CONVERSATION_PARTITIONS", str(topics.conversation_partitions))
    capsys.readouterr()
    assert await asyncio.to_thread(cli_main, ["dead-letters", "list", "--code", "bad_magic_byte", "--show-record"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    poison = [line for line in lines if line.get("error_code") == "bad_magic_byte"]
    assert len(poison) == 1
    assert {line.get("error_code") for line in lines} == {"bad_magic_byte", "unreadable_dead_letter"}
    assert poison[0]["original_offset"] == garbage.offset and poison[0]["key"] == "conv-1"
    assert poison[0]["record"] == {"base64": "B25vdCBhdnJv"}, "an undecodable record is shown as its bytes"

    assert await asyncio.to_thread(cli_main, ["dead-letters", "replay"]) == 2, "replay needs positions or --all"
    assert await asyncio.to_thread(cli_main, ["dead-letters", "replay", poison[0]["position"], "9:999"]) == 1
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["replayed"] == [poison[0]["position"]] and report["not_found"] == ["9:999"]
    assert await _replayed_copies(topics, garbage.partition, after=garbage.offset) == [
        (b"\x07not avro", poison[0]["position"].encode())
    ]


async def _replayed_copies(settings: KafkaSettings, partition: int, *, after: int) -> list[tuple[bytes, bytes]]:
    """(value, replayed-from header) of the run_started records after ``after`` that are replays."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(Topics.RUN_STARTED.physical_name(settings), partition)
        consumer.assign([tp])
        consumer.seek(tp, after + 1)
        end = (await consumer.end_offsets([tp]))[tp]
        copies: list[tuple[bytes, bytes]] = []
        while await consumer.position(tp) < end:
            for record in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                replayed_from = dict(record.headers).get(letters.REPLAYED_FROM_HEADER)
                if replayed_from is not None:
                    copies.append((record.value, replayed_from))
        return copies
    finally:
        await consumer.stop()


async def test_a_record_that_failed_again_after_its_replay_is_replayed_once_from_its_latest_letter(
    topics: KafkaSettings, group_id: str
) -> None:
    """``replay --all`` after a replay that failed again: the first letter is superseded, not resent."""
    rejected = _run_started()
    async with RecordProducer(topics, service="test") as producer:
        await producer.send(Topics.RUN_STARTED, rejected)
    bug_fixed = False
    refusals = 0
    handled: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        nonlocal refusals
        if not bug_fixed:
            refusals += 1
            raise PermanentRecordError("unknown_org", "organization does not exist")
        handled.append(inbound)

    await consume_run_started_until(topics, group_id, handler, done=lambda: refusals == 1)
    first = (await _listing_with(topics, 1, letters.LetterFilter())).letters
    assert (await letters.replay(topics, first)).replayed == [first[0].position]
    await consume_run_started_until(topics, group_id, handler, done=lambda: refusals == 2)

    listing = await _listing_with(topics, 2, letters.LetterFilter())
    earlier, later = (stored.position for stored in listing.letters)
    assert listing.superseded_by == {earlier: later}
    bug_fixed = True
    report = await letters.replay(topics, listing.letters, superseded_by=listing.superseded_by)
    assert report.replayed == [later]
    assert report.as_dict()["skipped"] == [
        {"position": str(earlier), "reason": "superseded", "superseded_by": str(later)}
    ]
    await consume_run_started_until(topics, group_id, handler, done=lambda: bool(handled))
    assert dict(handled[0].headers)[letters.REPLAYED_FROM_HEADER] == str(later).encode()
    original = listing.letters[0].letter
    copies = await _replayed_copies(topics, original.original_partition, after=original.original_offset)
    assert [replayed_from for _, replayed_from in copies] == [str(earlier).encode(), str(later).encode()]


async def test_a_letter_the_producer_refuses_is_reported_failed_and_the_others_are_still_replayed(
    topics: KafkaSettings,
) -> None:
    """One bad send must not cost the operator the report of the letters that did go back."""
    fine, huge = _run_started(), _run_started()
    serde = Serde.from_settings(topics)
    name = Topics.RUN_STARTED.physical_name(topics)

    def letter_of(value: bytes, offset: int) -> DeadLetter:
        return DeadLetter(
            original_topic=name,
            original_partition=0,
            original_offset=offset,
            original_key=b"k",
            original_value=value,
            error_code="unknown_org",
            error_message="organization does not exist",
            failed_at=fine.occurred_at,
            service="test",
            attempts=1,
            original_headers=(),
        )

    # 2 MB of zeros: over the producer's 1 MB request limit, yet it fits the dead-letter
    # topic compressed (as a record from a compressing producer would).
    oversized = serde.encode(Topics.RUN_STARTED, huge) + bytes(2_000_000)
    raw = AIOKafkaProducer(
        bootstrap_servers=topics.bootstrap_servers, compression_type="gzip", max_request_size=8_000_000
    )
    await raw.start()
    try:
        dead_letters = Topics.DEAD_LETTER.physical_name(topics)
        await raw.send_and_wait(dead_letters, serde.encode(Topics.DEAD_LETTER, letter_of(oversized, 1)))
        await raw.send_and_wait(
            dead_letters, serde.encode(Topics.DEAD_LETTER, letter_of(serde.encode(Topics.RUN_STARTED, fine), 2))
        )
    finally:
        await raw.stop()

    listing = await _listing_with(topics, 2, letters.LetterFilter())
    too_big, sendable = (stored.position for stored in listing.letters)
    report = await letters.replay(topics, listing.letters)
    assert report.failed == [(too_big, "record_too_large")]
    assert report.replayed == [sendable]
    copies = await _replayed_copies(topics, 0, after=-1)
    assert copies == [(serde.encode(Topics.RUN_STARTED, fine), str(sendable).encode())]
