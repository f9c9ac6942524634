"""Billing from Kafka: cost, tokens and runs per organization and month, from ``run_completed``.

What an external team (billing, analytics) would write against Switchboard's published
contract, and nothing more: the topic name, the Confluent wire format, and the schema
files in ``schemas/`` (``run_completed.avsc`` as the reader schema, ``catalog.json`` and
``released/`` for the writer schema of every schema id). It never imports Switchboard's
code (a test checks), so it can be copied out of this repository with a copy of
``schemas/``. See docs/consumers.md for the guarantees it relies on.

Decisions a billing consumer has to make, made here:

- **Duplicates**: delivery is at-least-once, so the same run can arrive twice. A run is
  counted once per ``run_id`` (a retried run has a new ``run_id`` and its own cost), with
  the record of it that reports the most usage (see :class:`Ledger`).
- **Dry runs** (``dry_run = true``, test runs from the agent editor) are **billed**: they
  called the real model and Switchboard's own usage counters and budgets count them. They
  are also shown apart (``dry_runs``, ``dry_run_cost_micro_usd``) so a policy can waive them.
- **Month**: the UTC calendar month of ``completed_at``, as Switchboard's usage counters.
- **Unknown schema id**: an error, never a skipped record (a skipped record is lost
  revenue); update the copy of ``schemas/`` (releases only ever add files).

Usage (reads the whole retained topic, 35 days, up to its end at start, then prints)::

    python examples/billing_consumer.py --bootstrap-servers 127.0.0.1:9092 [--topic-prefix P]
        [--month 2026-11] [--json] [--schemas DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import struct
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import fastavro
from aiokafka import AIOKafkaConsumer

TOPIC = "run_completed"
SUBJECT = f"{TOPIC}-value"
SCHEMAS_DIR = Path(__file__).resolve().parent.parent / "schemas"
MICROS_PER_USD = 1_000_000
_HEADER = struct.Struct(">bI")  # Confluent framing: magic byte 0, schema id (big-endian uint32)


class ContractViolation(Exception):
    """A value that does not follow the published contract (framing or schema id)."""


class RunCompletedDecoder:
    """Decodes ``run_completed`` values: writer schema by the frame's id, read with our reader schema.

    Reading with a fixed reader schema is what makes the consumer tolerant: fields added by a
    newer writer are skipped, fields an older writer lacked take their defaults.
    """

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        self._reader = fastavro.parse_schema(json.loads((schemas_dir / f"{TOPIC}.avsc").read_text()))
        catalog = json.loads((schemas_dir / "catalog.json").read_text())
        self._writers = {
            int(entry["id"]): fastavro.parse_schema(json.loads((schemas_dir / entry["path"]).read_text()))
            for entry in catalog["subjects"][SUBJECT]
        }

    def decode(self, value: bytes | None) -> dict[str, Any]:
        if not value or len(value) < _HEADER.size:
            raise ContractViolation("empty or truncated value (run_completed never carries tombstones)")
        magic, schema_id = _HEADER.unpack_from(value)
        if magic != 0:
            raise ContractViolation(f"magic byte {magic}, expected 0 (Confluent wire format)")
        writer = self._writers.get(schema_id)
        if writer is None:
            raise ContractViolation(f"schema id {schema_id} is not a released {SUBJECT} schema: update schemas/")
        record = fastavro.schemaless_reader(io.BytesIO(value[_HEADER.size :]), writer, self._reader)
        if not isinstance(record, dict):
            raise ContractViolation(f"schema id {schema_id} does not describe a record")
        return record


@dataclass
class MonthTotals:
    """One invoice line: an organization's usage in one month."""

    org_id: str
    month: str  # YYYY-MM, UTC
    runs: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_micro_usd: int = 0
    dry_runs: int = 0
    dry_run_cost_micro_usd: int = 0

    @property
    def cost_usd(self) -> Decimal:
        return Decimal(self.cost_micro_usd) / MICROS_PER_USD


_SUMMED = ("tokens_in", "tokens_out", "cache_read_tokens", "cache_write_tokens", "cost_micro_usd")


@dataclass(frozen=True)
class _Counted:
    """What one run added to its line, kept so a better record of the same run can replace it."""

    key: tuple[str, str]
    usage: tuple[int, ...]  # in the order of _SUMMED
    dry_run: bool

    @property
    def weight(self) -> tuple[int, int]:
        return self.usage[-1], sum(self.usage[:-1])


class Ledger:
    """Totals per (org, month), each run counted once however often it is delivered.

    Two records of one ``run_id`` are normally the same record delivered twice. The other
    case: the dispatcher closes a run whose runner went silent with a zero-usage record
    (``error_family = processLost``), and the runner, only slow, still reports the run's real
    usage. So a run counts with the record that reports the most usage, whatever the order.
    """

    def __init__(self) -> None:
        self._counted: dict[UUID, _Counted] = {}
        self._totals: dict[tuple[str, str], MonthTotals] = {}
        self.duplicates = 0
        self.superseded = 0

    def add(self, record: Mapping[str, Any]) -> bool:
        """Count a decoded ``run_completed``; False when it adds nothing (its run was counted)."""
        run_id = UUID(str(record["run_id"]))
        completed: datetime = record["completed_at"]
        entry = _Counted(
            key=(str(record["org_id"]), completed.astimezone(UTC).strftime("%Y-%m")),
            usage=tuple(int(record[name]) for name in _SUMMED),
            dry_run=bool(record["dry_run"]),
        )
        previous = self._counted.get(run_id)
        if previous is not None:
            if entry.weight <= previous.weight:
                self.duplicates += 1
                return False
            self._apply(previous, -1)
            self.superseded += 1
        self._counted[run_id] = entry
        self._apply(entry, 1)
        return True

    def _apply(self, entry: _Counted, sign: int) -> None:
        line = self._totals.setdefault(entry.key, MonthTotals(*entry.key))
        line.runs += sign
        for name, value in zip(_SUMMED, entry.usage, strict=True):
            setattr(line, name, getattr(line, name) + sign * value)
        if entry.dry_run:
            line.dry_runs += sign
            line.dry_run_cost_micro_usd += sign * entry.usage[-1]
        if line.runs == 0:
            del self._totals[entry.key]

    def lines(self, month: str | None = None) -> list[MonthTotals]:
        return [self._totals[key] for key in sorted(self._totals) if month is None or key[1] == month]


async def consume(
    bootstrap_servers: str,
    *,
    topic_prefix: str = "",
    schemas_dir: Path = SCHEMAS_DIR,
    ledger: Ledger | None = None,
    timeout_s: float = 60.0,
) -> Ledger:
    """Read ``run_completed`` from the beginning up to its end as of now, into a ledger
    (``TimeoutError`` after ``timeout_s`` without progress).

    No consumer group and no committed offsets: each invocation replays what the topic
    retains, so a crash mid-way costs a re-read, never a double count.
    """
    decoder = RunCompletedDecoder(schemas_dir)
    ledger = ledger or Ledger()
    consumer = AIOKafkaConsumer(
        f"{topic_prefix}{TOPIC}",
        bootstrap_servers=bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not consumer.assignment():
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic_prefix}{TOPIC} has no partitions (does it exist?)")
            await asyncio.sleep(0.1)
        partitions = list(consumer.assignment())
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        pending = {tp for tp in partitions if ends[tp] > 0}
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no progress on partitions {sorted(tp.partition for tp in pending)} in {timeout_s} s"
                )
            batches = await consumer.getmany(*pending, timeout_ms=500)
            if batches:
                deadline = time.monotonic() + timeout_s
            for messages in batches.values():
                for message in messages:
                    ledger.add(decoder.decode(message.value))
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
    finally:
        await consumer.stop()
    return ledger


def render_table(lines: Iterable[MonthTotals]) -> str:
    header = ("org_id", "month", "runs", "tokens_in", "tokens_out", "cache_read", "cache_write", "cost_usd", "dry_runs")
    rows = [
        (
            line.org_id,
            line.month,
            str(line.runs),
            str(line.tokens_in),
            str(line.tokens_out),
            str(line.cache_read_tokens),
            str(line.cache_write_tokens),
            f"{line.cost_usd:.6f}",
            str(line.dry_runs),
        )
        for line in lines
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in [header, *rows]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Totals cost, tokens and runs per org and month from run_completed.")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--topic-prefix", default=os.environ.get("KAFKA_TOPIC_PREFIX", ""))
    parser.add_argument("--schemas", type=Path, default=SCHEMAS_DIR, help="a copy of Switchboard's schemas/")
    parser.add_argument("--month", default=None, help="only this month, YYYY-MM (UTC)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    ledger = asyncio.run(consume(args.bootstrap_servers, topic_prefix=args.topic_prefix, schemas_dir=args.schemas))
    lines = ledger.lines(args.month)
    if args.json:
        print(json.dumps([asdict(line) for line in lines], indent=2))
    else:
        print(render_table(lines))
        print(
            f"({ledger.duplicates} duplicate deliveries ignored, {ledger.superseded} zero-usage closures superseded)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
