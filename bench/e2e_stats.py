"""The pure part of the end-to-end benchmark: pair replies with messages, sum them up, build the measurements.

No I/O here, so it is unit-tested as is (tests/unit/bench/test_end_to_end.py). A reply
carries no reference to the message it answers (the customer just gets a text), so a
reply is paired with a message **by chat and order**: the n-th reply the channel server
received for a chat answers the n-th message sent in it. The load spreads messages over
many chats, seconds apart within one chat, so a reply normally arrives before the next
message of its chat is sent and the pairing is exact; under overload two messages of a
chat may be answered by one follow-up run, which shows up here as a lost message (and a
later reply paired with an earlier message: a pessimistic latency).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from bench.report import Goal, Measurement

GOAL_P99_MS = 100.0
# The throughput goal: the pipeline kept up with the offered rate (replies/s within 5 % of it).
KEEP_UP = 0.95


@dataclass(frozen=True, slots=True)
class Sent:
    """One customer message as the load generator sent it (wall-clock seconds since the epoch)."""

    chat_id: str
    sent_at: float


@dataclass(frozen=True, slots=True)
class Received:
    """One reply as the channel server recorded it (its ``received_at``, as epoch seconds)."""

    chat_id: str
    received_at: float


@dataclass(frozen=True, slots=True)
class Matched:
    latencies_ms: tuple[float, ...]  # one per answered message
    lost: int  # messages with no reply
    doubled: int  # replies beyond one per message
    first_received: float | None
    last_received: float | None


@dataclass(frozen=True, slots=True)
class Summary:
    """One pipeline's figures at one offered rate."""

    name: str
    offered_rate: float
    sent: int
    answered: int
    lost: int
    doubled: int
    ingest_errors: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    throughput: float | None  # answered replies/s, from the first reply to the last


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..1): the smallest value with at least ``q`` of them at or below it."""
    if not values:
        return None
    if not 0 <= q <= 1:
        raise ValueError(f"q must be within 0..1, not {q}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def match(sent: Iterable[Sent], received: Iterable[Received]) -> Matched:
    """Pair the n-th reply of each chat with its n-th message; replies to chats not sent to are ignored."""
    messages: dict[str, list[float]] = defaultdict(list)
    for item in sent:
        messages[item.chat_id].append(item.sent_at)
    replies: dict[str, list[float]] = defaultdict(list)
    for reply in received:
        if reply.chat_id in messages:
            replies[reply.chat_id].append(reply.received_at)
    latencies: list[float] = []
    lost = doubled = 0
    for chat, times in messages.items():
        times.sort()
        answers = sorted(replies.get(chat, []))
        latencies.extend((answer - at) * 1000.0 for at, answer in zip(times, answers, strict=False))
        lost += max(0, len(times) - len(answers))
        doubled += max(0, len(answers) - len(times))
    every_reply = [at for answers in replies.values() for at in answers]
    return Matched(
        latencies_ms=tuple(latencies),
        lost=lost,
        doubled=doubled,
        first_received=min(every_reply, default=None),
        last_received=max(every_reply, default=None),
    )


def summarize(name: str, offered_rate: float, sent: Sequence[Sent], matched: Matched, ingest_errors: int) -> Summary:
    """The figures of one pipeline; ``sent`` are the messages accepted by its webhook."""
    throughput = None
    if matched.first_received is not None and matched.last_received is not None:
        span = matched.last_received - matched.first_received
        throughput = (len(matched.latencies_ms) - 1) / span if span > 0 else None
    return Summary(
        name=name,
        offered_rate=offered_rate,
        sent=len(sent),
        answered=len(matched.latencies_ms),
        lost=matched.lost,
        doubled=matched.doubled,
        ingest_errors=ingest_errors,
        p50_ms=percentile(matched.latencies_ms, 0.50),
        p99_ms=percentile(matched.latencies_ms, 0.99),
        max_ms=max(matched.latencies_ms, default=None),
        throughput=throughput,
    )


def measurements(real: Summary, baseline: Summary | None, baseline_label: str) -> list[Measurement]:
    """The ``e2e.*`` lines of ``latest.json`` (names and meanings: docs/benchmarks.md)."""
    base = baseline or Summary(baseline_label, real.offered_rate, 0, 0, 0, 0, 0, None, None, None, None)

    def line(
        metric: str, value: float | None, unit: str, against: float | None, goal: Goal | None = None
    ) -> Measurement:
        return Measurement.of(metric, value, unit, baseline=baseline_label, baseline_value=against, goal=goal)

    p99 = line("e2e.latency.p99", real.p99_ms, "ms", base.p99_ms, Goal("value", "<=", GOAL_P99_MS))
    if real.sent and real.lost > real.sent // 100:
        # More than 1 % unanswered: the true p99 is beyond the drain deadline, whatever the answered ones say.
        p99 = replace(p99, met=False)
    return [
        line("e2e.latency.p50", real.p50_ms, "ms", base.p50_ms),
        p99,
        line("e2e.latency.max", real.max_ms, "ms", base.max_ms),
        line(
            "e2e.throughput",
            real.throughput,
            "msg/s",
            base.throughput,
            Goal("value", ">=", round(KEEP_UP * real.offered_rate, 3)),
        ),
        line("e2e.lost", float(real.lost), "msgs", float(base.lost) if baseline else None),
        line("e2e.doubled", float(real.doubled), "msgs", float(base.doubled) if baseline else None),
        line("e2e.ingest_errors", float(real.ingest_errors), "msgs", float(base.ingest_errors) if baseline else None),
    ]
