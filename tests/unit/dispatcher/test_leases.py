"""Leases (pure): the start lease of a run no runner took yet, and no judging while catching up.

docs/chaos.md findings 1 and 2: a run merely queued in a lagging runner must not be
re-dispatched into the same backlog, and a worker that has not read its input yet must
not take unread evidence for silence.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from services.dispatcher.policy import PolicyConfig, apply
from services.dispatcher.recovery import CatchUp
from services.dispatcher.state import ConversationState
from switchboard.contracts import DispatcherTick, DispatchOutcome, Record, RunRequested, Topics
from tests.unit.dispatcher.builders import (
    CONVERSATION,
    ORG,
    T0,
    context,
    dispatch,
    heartbeat,
    index_of,
    snapshot,
    started,
)

CONFIG = PolicyConfig(lease_s=30.0, start_lease_s=120.0, max_attempts=3, reply_interval_s=0.0)
INDEX = index_of(snapshot(1))


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Driver:
    """One conversation through the state machine; its first run is dispatched at T0."""

    def __init__(self) -> None:
        self.state: ConversationState | None = None
        self.runs: list[RunRequested] = []
        self.outcomes: list[DispatchOutcome] = []
        self.send(dispatch("olá"), at=T0)

    def send(
        self, record: Record, *, at: datetime, judge_from: datetime | None = None, queued: bool | None = None
    ) -> None:
        ctx = context(INDEX, now=at, config=CONFIG, judge_leases_from=judge_from, queued=lambda _run: queued)
        state = ConversationState.from_bytes(self.state.to_bytes()) if self.state is not None else None
        t = apply(state, record, ctx)
        self.state = t.state
        self.runs += [e.record for e in t.outputs if e.topic is Topics.RUN_REQUESTED]  # type: ignore[misc]
        self.outcomes += [d.outcome for d in t.decisions]

    def tick(self, at: datetime, *, queued: bool | None = None) -> None:
        tick = DispatcherTick(org_id=ORG, conversation_id=CONVERSATION, due_at=at, worker_id="t")
        self.send(tick, at=at, queued=queued)

    @property
    def attempt(self) -> int:
        return self.runs[-1].attempt

    @property
    def lease_expires_at(self) -> datetime:
        assert self.state is not None and self.state.active is not None
        return self.state.active.lease_expires_at


# --------------------------------------------------------------------------- start lease


@dataclass(frozen=True)
class LeaseCase:
    name: str
    # (seconds after T0, "started" | "heartbeat" | "tick") applied in order
    events: tuple[tuple[float, str], ...]
    attempt: int  # the newest attempt afterwards (1: never recovered)
    lease_expires_at: float


LEASE_CASES = [
    LeaseCase("a run no runner took yet keeps its start lease", ((31, "tick"), (119, "tick")), 1, 120),
    LeaseCase("its start lease expires: recovered", ((121, "tick"),), 2, 121 + 120),
    LeaseCase("run_started replaces the start lease, even shorter", ((1, "started"), (32, "tick")), 2, 32 + 120),
    LeaseCase("a heartbeat at acceptance does too", ((5, "heartbeat"), (34, "tick")), 1, 35),
    LeaseCase("accepted late: the lease runs from that heartbeat", ((100, "heartbeat"), (121, "tick")), 1, 130),
    LeaseCase("then a lease without news expires", ((100, "heartbeat"), (131, "tick")), 2, 131 + 120),
    LeaseCase(
        "the latest heartbeat counts",
        ((1, "started"), (25, "heartbeat"), (50, "heartbeat"), (79, "tick")),
        1,
        80,
    ),
    LeaseCase("a recovery attempt gets a start lease again", ((121, "tick"), (152, "tick")), 2, 241),
]


@pytest.mark.parametrize("case", LEASE_CASES, ids=[c.name for c in LEASE_CASES])
def test_a_lease_runs_from_the_runners_news_and_a_run_nobody_took_gets_the_start_lease(case: LeaseCase) -> None:
    conv = Driver()
    for at, what in case.events:
        run = conv.runs[-1]
        if what == "started":
            conv.send(started(run.run_id, run.agent_id, run.version_id, at=s(at)), at=s(at))
        elif what == "heartbeat":
            conv.send(heartbeat(run.run_id, run.agent_id), at=s(at))
        else:
            conv.tick(s(at))
    assert conv.attempt == case.attempt
    assert conv.lease_expires_at == s(case.lease_expires_at)


# --------------------------------------------------------------------------- a request still in the runners' queue


@dataclass(frozen=True)
class QueuedCase:
    name: str
    # (seconds after T0, "started" | "tick", what the run queue answers at that tick)
    events: tuple[tuple[float, str, bool | None], ...]
    attempt: int
    lease_expires_at: float


# CONFIG: lease 30 s, start lease 120 s, max_queued_s 600 s (the default).
QUEUED_CASES = [
    QueuedCase("still queued when its start lease lapses: it waits a lease", ((121, "tick", True),), 1, 151),
    QueuedCase(
        "queued, then taken by a runner that never said so: recovered",
        ((121, "tick", True), (151, "tick", False)),
        2,
        151 + 120,
    ),
    QueuedCase("unknown (no position, stale offsets): the start lease decides", ((121, "tick", None),), 2, 241),
    QueuedCase(
        "queued for longer than max_queued_s: recovered all the same",
        ((121, "tick", True), (580, "tick", True), (610, "tick", True)),
        2,
        610 + 120,
    ),
    QueuedCase(
        "a run a runner acknowledged is not held by an old position",
        ((1, "started", True), (32, "tick", True)),
        2,
        32 + 120,
    ),
]


@pytest.mark.parametrize("case", QUEUED_CASES, ids=[c.name for c in QUEUED_CASES])
def test_a_run_whose_request_still_waits_in_the_runners_queue_is_not_recovered(case: QueuedCase) -> None:
    """docs/chaos.md finding 2, the rest of it: a runner group lagging more than the start lease."""
    conv = Driver()
    for at, what, queued in case.events:
        run = conv.runs[-1]
        if what == "started":
            conv.send(started(run.run_id, run.agent_id, run.version_id, at=s(at)), at=s(at), queued=queued)
        else:
            conv.tick(s(at), queued=queued)
    assert conv.attempt == case.attempt
    assert conv.lease_expires_at == s(case.lease_expires_at)
    assert (DispatchOutcome.RECOVERED in conv.outcomes) is (case.attempt > 1)


# --------------------------------------------------------------------------- not judging while catching up


@dataclass(frozen=True)
class JudgeCase:
    name: str
    tick_at: float
    judge_from: float | None
    recovered: bool
    lease_expires_at: float


# The run started at +1: its lease ends at +31.
JUDGE_CASES = [
    JudgeCase("caught up: a lapsed lease is recovered", 40, None, True, 40 + 120),
    JudgeCase("catching up: the lease waits until the input is read", 40, 60, False, 60),
    JudgeCase("the catch-up is over: recovered", 61, 60, True, 61 + 120),
    JudgeCase("a lease that has not lapsed is left alone", 20, 60, False, 31),
]


@pytest.mark.parametrize("case", JUDGE_CASES, ids=[c.name for c in JUDGE_CASES])
def test_leases_are_not_judged_while_the_worker_catches_up(case: JudgeCase) -> None:
    conv = Driver()
    run = conv.runs[-1]
    conv.send(started(run.run_id, run.agent_id, run.version_id, at=s(1)), at=s(1))
    judge_from = s(case.judge_from) if case.judge_from is not None else None
    conv.send(
        DispatcherTick(org_id=ORG, conversation_id=CONVERSATION, due_at=s(31), worker_id="t"),
        at=s(case.tick_at),
        judge_from=judge_from,
    )
    assert (conv.attempt == 2) is case.recovered
    assert conv.outcomes[-1] is (DispatchOutcome.RECOVERED if case.recovered else DispatchOutcome.DISPATCHED)
    assert conv.lease_expires_at == s(case.lease_expires_at)


# --------------------------------------------------------------------------- the worker's catch-up


@dataclass(frozen=True)
class CatchUpCase:
    name: str
    # (seconds after T0 the batch is processed, how old its oldest record is, or None)
    batches: tuple[tuple[float, float | None], ...]
    # when leases may be judged again after each batch (None: at once)
    judge_from: tuple[float | None, ...]


STALE_CLOCK = tuple((40.0 + 10 * i, 100.0) for i in range(17))  # every record looks 100 s old
CATCH_UP_CASES = [
    CatchUpCase("a (re)started worker waits one lease", ((0, None), (10, None), (31, None)), (30, 30, None)),
    CatchUpCase(
        "one lease of silence (a single dead run) is no gap", ((0, None), (31, None), (62, None)), (30, None, None)
    ),
    CatchUpCase(
        "nothing processed for two leases (broker outage): one more lease",
        ((0, None), (31, None), (100, None), (110, None), (131, None)),
        (30, None, 130, 130, None),
    ),
    CatchUpCase(
        "the tick that ends a deferral is not a new gap",
        ((0, None), (40, None), (120, None), (150.2, None)),
        (30, None, 150, None),
    ),
    CatchUpCase(
        "reading records older than a lease (a backlog) defers until a lease after the last",
        ((0, None), (31, None), (40, 100), (50, 50), (60, 5), (91, None)),
        (30, None, 70, 80, 80, None),
    ),
    CatchUpCase(
        "a producer with a lagging clock suspends judging for the start lease at most",
        ((0, None), (31, None), *STALE_CLOCK),
        (30, None, *(b[0] + 30 for b in STALE_CLOCK[:13]), 190, 190, None, None),
    ),
]


@pytest.mark.parametrize("case", CATCH_UP_CASES, ids=[c.name for c in CATCH_UP_CASES])
def test_a_worker_judges_leases_only_once_caught_up_with_its_input(case: CatchUpCase) -> None:
    catch_up = CatchUp(lease_s=30, max_catch_up_s=120)
    got = [catch_up.observe(s(at), s(at - age) if age is not None else None) for at, age in case.batches]
    assert got == [s(j) if j is not None else None for j in case.judge_from]
