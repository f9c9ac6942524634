"""The operator's view of the dead-letter topic: list what failed, replay it once fixed.

A dead letter keeps the original key, bytes and headers (``dead_letter.py``), so after the
cause is fixed (a consumer bug deployed, an org restored, a schema registered) the record
can go back, byte for byte, to the partition it came from. Consumers are idempotent
(SPEC §2.4), so replaying a record that was in fact processed does no harm.

Reading never joins a consumer group: the partitions are assigned by hand and read from
the beginning up to the end they had when the read started, so a listing is a snapshot
and commits nothing that a service could resume from.

Every replayed copy carries a ``dlq.replayed_from`` header (``<partition>:<offset>`` of its
letter), so a record that fails again can be told apart from its first failure — and the
earlier letter is then *superseded*: a replay sends the newer letter, never both copies.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from switchboard.contracts import DeadLetter, Serde, Topics, all_topics
from switchboard.contracts.errors import ContractError
from switchboard.contracts.topics import TopicSpec
from switchboard.settings import KafkaSettings

REPLAYED_FROM_HEADER = "dlq.replayed_from"
_POLL_MS = 500


@dataclass(frozen=True, slots=True)
class Position:
    """Where a letter sits in the dead-letter topic: what an operator names to replay it."""

    partition: int
    offset: int

    @classmethod
    def parse(cls, text: str) -> Position:
        """``"<partition>:<offset>"``, as :meth:`__str__` prints it."""
        partition, sep, offset = text.partition(":")
        if not sep or not partition.isdigit() or not offset.isdigit():
            raise ValueError(f"not a dead-letter position (want PARTITION:OFFSET): {text!r}")
        return cls(int(partition), int(offset))

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"


@dataclass(frozen=True, slots=True)
class StoredLetter:
    """A dead letter with its place in the topic."""

    position: Position
    letter: DeadLetter


@dataclass(frozen=True, slots=True)
class LetterFilter:
    """Which letters an operator means. Empty fields match everything.

    ``topic`` is a logical topic name (``dispatch_requested``) or a physical one (with the
    prefix); ``positions`` picks exact letters.
    """

    topic: str | None = None
    error_code: str | None = None
    service: str | None = None
    since: datetime | None = None
    positions: frozenset[Position] = frozenset()

    def matches(self, stored: StoredLetter, settings: KafkaSettings) -> bool:
        letter = stored.letter
        if self.positions and stored.position not in self.positions:
            return False
        if self.topic is not None and letter.original_topic not in (self.topic, f"{settings.topic_prefix}{self.topic}"):
            return False
        if self.error_code is not None and letter.error_code != self.error_code:
            return False
        if self.service is not None and letter.service != self.service:
            return False
        return self.since is None or letter.failed_at >= self.since


@dataclass(slots=True)
class Listing:
    """A snapshot of the topic: the letters that matched, and records that were not letters."""

    letters: list[StoredLetter] = field(default_factory=list)
    # Records on the dead-letter topic that do not decode as a DeadLetter (written by hand?).
    unreadable: list[Position] = field(default_factory=list)
    # Letter → the later letter of its replayed copy (it failed again), over the whole topic,
    # whatever the filter: replaying both would send the same record twice.
    superseded_by: dict[Position, Position] = field(default_factory=dict)


@dataclass(slots=True)
class ReplayReport:
    replayed: list[Position] = field(default_factory=list)
    # Letters left alone, with the stable reason: ``unknown_topic`` (not a topic of this
    # deployment's prefix), ``no_value`` (nothing to send) or ``superseded`` (replayed
    # before and failed again: the later letter, in ``superseded_by``, is the one to send).
    skipped: list[tuple[Position, str]] = field(default_factory=list)
    superseded_by: dict[Position, Position] = field(default_factory=dict)
    # Letters the broker or the producer refused, with a stable code: ``record_too_large``
    # or ``send_failed``. The others are still sent and reported.
    failed: list[tuple[Position, str]] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "replayed": [str(p) for p in self.replayed],
            "skipped": [
                {"position": str(p), "reason": reason}
                | ({"superseded_by": str(self.superseded_by[p])} if p in self.superseded_by else {})
                for p, reason in self.skipped
            ],
            "failed": [{"position": str(p), "error_code": code} for p, code in self.failed],
        }


async def read_dead_letters(
    settings: KafkaSettings, selection: LetterFilter = LetterFilter(), *, limit: int | None = None
) -> Listing:
    """The letters that match ``selection``, oldest first per partition, at most ``limit``."""
    serde = Serde.from_settings(settings)
    name = Topics.DEAD_LETTER.physical_name(settings)
    consumer = AIOKafkaConsumer(
        **settings.client_options(),
        client_id=f"{settings.client_id}-dead-letters",
        group_id=None,
        enable_auto_commit=False,
    )
    await consumer.start()
    listing = Listing()
    try:
        if name not in await consumer.topics():
            return listing
        # The registry's count: the admin code refuses a topic shaped otherwise (admin.py).
        partitions = [TopicPartition(name, p) for p in range(Topics.DEAD_LETTER.partition_count(settings))]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        remaining = {tp for tp in partitions if ends[tp] > await consumer.position(tp)}
        while remaining and (limit is None or len(listing.letters) < limit):
            batches = await consumer.getmany(*remaining, timeout_ms=_POLL_MS)
            for tp, records in batches.items():
                for record in records:
                    if record.offset >= ends[tp]:
                        break
                    _collect(listing, serde, Position(tp.partition, record.offset), record.value, selection, settings)
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    if limit is not None:
        del listing.letters[limit:]
    return listing


def _collect(
    listing: Listing,
    serde: Serde,
    position: Position,
    value: bytes | None,
    selection: LetterFilter,
    settings: KafkaSettings,
) -> None:
    try:
        letter = serde.decode(Topics.DEAD_LETTER, value)
    except ContractError:
        listing.unreadable.append(position)
        return
    replayed_from = _replayed_from(letter)
    if replayed_from is not None:
        with contextlib.suppress(ValueError):  # a header written by hand: nothing is superseded
            listing.superseded_by[Position.parse(replayed_from)] = position
    stored = StoredLetter(position, letter)
    if selection.matches(stored, settings):
        listing.letters.append(stored)


def _known_topics(settings: KafkaSettings) -> dict[str, TopicSpec[Any]]:
    """Physical name → topic, for the topics a replay may write to (never the dead-letter topic)."""
    return {t.physical_name(settings): t for t in all_topics() if t is not Topics.DEAD_LETTER}


async def replay(
    settings: KafkaSettings,
    letters: Sequence[StoredLetter],
    *,
    superseded_by: Mapping[Position, Position] | None = None,
    dry_run: bool = False,
) -> ReplayReport:
    """Send each letter's original record back to its topic and partition.

    Only topics of this deployment (its prefix's registry) are written: a letter from
    another prefix's topic is skipped, never sent somewhere it did not come from. A letter
    in ``superseded_by`` (``Listing.superseded_by``) is skipped: its record was replayed and
    failed again, and the later letter carries the same bytes.
    """
    report = ReplayReport(dry_run=dry_run)
    known = _known_topics(settings)
    superseded_by = superseded_by or {}
    sendable: list[StoredLetter] = []
    for stored in letters:
        if stored.position in superseded_by:
            report.skipped.append((stored.position, "superseded"))
            report.superseded_by[stored.position] = superseded_by[stored.position]
        elif stored.letter.original_topic not in known:
            report.skipped.append((stored.position, "unknown_topic"))
        elif stored.letter.original_value is None:
            report.skipped.append((stored.position, "no_value"))
        else:
            sendable.append(stored)
    if dry_run:
        report.replayed.extend(s.position for s in sendable)
        return report
    if not sendable:
        return report
    producer = AIOKafkaProducer(
        **settings.client_options(),
        client_id=f"{settings.client_id}-dead-letters",
        enable_idempotence=True,
        acks="all",
    )
    await producer.start()
    try:
        outcomes = await asyncio.gather(
            *(_send_back(producer, settings, known, stored) for stored in sendable), return_exceptions=True
        )
    finally:
        await producer.stop()
    for stored, outcome in zip(sendable, outcomes, strict=True):
        if isinstance(outcome, MessageSizeTooLargeError):
            report.failed.append((stored.position, "record_too_large"))
        elif isinstance(outcome, KafkaError):
            report.failed.append((stored.position, "send_failed"))
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            report.replayed.append(stored.position)
    return report


async def _send_back(
    producer: AIOKafkaProducer, settings: KafkaSettings, known: dict[str, TopicSpec[Any]], stored: StoredLetter
) -> Any:
    """Send one letter's record and wait for the broker's ack (the record's metadata)."""
    letter = stored.letter
    partitions = known[letter.original_topic].partition_count(settings)
    headers = [(h.key, h.value) for h in letter.original_headers if h.key != REPLAYED_FROM_HEADER]
    headers.append((REPLAYED_FROM_HEADER, str(stored.position).encode()))
    # The original partition keeps the record's order with its conversation; a letter without
    # one (the outbox's, -1) or beyond the topic's partitions goes where its key sends it.
    partition = letter.original_partition if 0 <= letter.original_partition < partitions else None
    delivery = await producer.send(
        letter.original_topic, letter.original_value, key=letter.original_key, partition=partition, headers=headers
    )
    return await delivery


def describe(stored: StoredLetter, settings: KafkaSettings, *, with_record: bool = False) -> dict[str, Any]:
    """One letter as JSON for the CLI. The record's content (customer text) only on request."""
    letter = stored.letter
    described: dict[str, Any] = {
        "position": str(stored.position),
        "failed_at": letter.failed_at.isoformat(),
        "service": letter.service,
        "consumer_group": letter.consumer_group,
        "error_code": letter.error_code,
        "error_message": letter.error_message,
        "attempts": letter.attempts,
        "original_topic": letter.original_topic,
        "original_partition": letter.original_partition,
        "original_offset": letter.original_offset,
        "key": _text_or_base64(letter.original_key),
        "value_bytes": None if letter.original_value is None else len(letter.original_value),
        "replayed_from": _replayed_from(letter),
    }
    if with_record:
        described["record"] = _decoded_record(letter, settings)
    return described


def _replayed_from(letter: DeadLetter) -> str | None:
    """Set when the record that failed was itself a replay: the earlier letter's position."""
    for header in letter.original_headers:
        if header.key == REPLAYED_FROM_HEADER:
            return header.value.decode("utf-8", errors="replace") if header.value is not None else None
    return None


def _decoded_record(letter: DeadLetter, settings: KafkaSettings) -> Any:
    """The original record as JSON when it decodes; else its bytes in base64 (it is the poison)."""
    topic = _known_topics(settings).get(letter.original_topic)
    if topic is not None:
        try:
            return Serde.from_settings(settings).decode(topic, letter.original_value).model_dump(mode="json")
        except ContractError:
            pass
    return {"base64": _base64(letter.original_value)}


def _text_or_base64(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def _base64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def positions(texts: Iterable[str]) -> frozenset[Position]:
    """Parse ``PARTITION:OFFSET`` arguments (``ValueError`` names the bad one)."""
    return frozenset(Position.parse(text) for text in texts)
