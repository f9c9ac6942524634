"""The chaos verdict: pure functions of a :class:`Snapshot`, the run events and the faults.

- **none lost**: every message is answered by a run, or carries a decision that closes it
  (no_match, conv_busy, budget_exceeded, lost); a run closed as ``processLost`` because a
  recovery attempt replaced it answers nothing — its recovery does;
- **none doubled**: no message is answered by two runs; the channel received at most one
  reply per run and never two replies to the same message;
- **no overlap**: per conversation, no two runs active at once, from the run table
  (started_at..completed_at) and from the events (run_started..run_completed; a run
  without a run_completed ends when the recovery attempt that replaced it starts);
- **all terminal**: every run is completed, failed, aborted or handoff.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from switchboard.contracts import RunCompleted, RunStarted
from tests.chaos.observe import RunEvents, RunRow, Snapshot
from tests.chaos.workload import Fault

TERMINAL = frozenset({"completed", "failed", "aborted", "handoff"})
CLOSING_DECISIONS = frozenset({"no_match", "conv_busy", "budget_exceeded", "lost"})
SUPERSEDED_FAMILY = "processLost"
# Delivery states that record a reply was not (or maybe not) sent: accounted for, never retried.
RECORDED_UNDELIVERED = frozenset({"unknown", "failed"})


# A recovery attempt that found its messages answered by an earlier attempt (services/runner/outcome.py).
ALREADY_ANSWERED = "already_answered"


def answers(run: RunRow) -> bool:
    """Does this run count as the answer to its messages (not a dry run, not a lost attempt, not a
    recovery attempt that found them answered and did nothing)?"""
    if run.is_dry_run or run.abort_reason == ALREADY_ANSWERED:
        return False
    return not (run.status == "failed" and run.error_family == SUPERSEDED_FAMILY)


def describe(run: RunRow) -> str:
    """One run, enough to tell why it counts (a finding quotes these)."""
    family = f"/{run.error_family}" if run.error_family else ""
    parent = f" parent {run.parent_run_id}" if run.parent_run_id else ""
    return f"{run.id} {run.status}{family} attempt {run.attempt}{parent} {run.started_at}..{run.completed_at}"


@dataclass
class Verdict:
    lost_messages: list[str] = field(default_factory=list)
    doubly_answered: list[str] = field(default_factory=list)
    non_terminal_runs: list[str] = field(default_factory=list)
    overlaps_in_table: list[str] = field(default_factory=list)
    overlaps_in_events: list[str] = field(default_factory=list)
    doubled_replies: list[str] = field(default_factory=list)
    stray_replies: list[str] = field(default_factory=list)
    missing_replies: list[str] = field(default_factory=list)
    two_replies_one_message: list[str] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        """Nothing pending any more (what the settle loop waits for; doubles cannot un-happen)."""
        return not (self.lost_messages or self.non_terminal_runs or self.missing_replies)

    def problems(self) -> dict[str, list[str]]:
        named = {
            "lost messages": self.lost_messages,
            "messages answered by two runs": self.doubly_answered,
            "runs not terminal": self.non_terminal_runs,
            "overlapping runs (table)": self.overlaps_in_table,
            "overlapping runs (events)": self.overlaps_in_events,
            "replies delivered twice": self.doubled_replies,
            "replies matching no completed run": self.stray_replies,
            "completed runs whose reply is missing": self.missing_replies,
            "messages that got two replies": self.two_replies_one_message,
        }
        return {k: v[:10] for k, v in named.items() if v}


def overlaps(intervals: Iterable[tuple[uuid.UUID | None, datetime, datetime | None, uuid.UUID]]) -> list[str]:
    """(conversation, start, end or None = still open, run): pairs of runs of one conversation active together."""
    by_conversation: dict[uuid.UUID | None, list[tuple[datetime, datetime | None, uuid.UUID]]] = defaultdict(list)
    for conversation, start, end, run in intervals:
        by_conversation[conversation].append((start, end, run))
    found = []
    for conversation, spans in by_conversation.items():
        spans.sort(key=lambda s: s[0])
        open_until: datetime | None = None
        holder: uuid.UUID | None = None
        for start, end, run in spans:
            if holder is not None and (open_until is None or start < open_until):
                found.append(f"conversation {conversation}: run {run} started {start} while {holder} was active")
            if holder is None or (open_until is not None and (end is None or end > open_until)):
                open_until, holder = end, run
    return found


def event_intervals(
    started: list[RunStarted],
    completed: list[RunCompleted],
    parents: dict[uuid.UUID, uuid.UUID | None],
    closed_at: dict[uuid.UUID, datetime],
) -> list[tuple[uuid.UUID | None, datetime, datetime | None, uuid.UUID]]:
    """Each started run from its run_started to its run_completed. One without a run_completed (its runner
    was killed, or it was handed back as superseded) ends when a later attempt of it starts (``parents``:
    run -> parent, from run_requested; the attempt that replaced it may itself never have started), else
    when the run table says it was closed (``closed_at``)."""
    ends: dict[uuid.UUID, datetime] = {}
    for done in completed:
        ends[done.run_id] = min(done.completed_at, ends.get(done.run_id, done.completed_at))
    first_start: dict[uuid.UUID, RunStarted] = {}
    for start in started:
        if not start.dry_run:
            first_start.setdefault(start.run_id, start)
    replaced_at: dict[uuid.UUID, datetime] = {}
    for start in first_start.values():
        ancestor = parents.get(start.run_id, start.parent_run_id)
        while ancestor is not None:
            if ancestor not in replaced_at or start.started_at < replaced_at[ancestor]:
                replaced_at[ancestor] = start.started_at
            ancestor = parents.get(ancestor)
    return [
        (
            s.conversation_id,
            s.started_at,
            ends.get(s.run_id, replaced_at.get(s.run_id, closed_at.get(s.run_id))),
            s.run_id,
        )
        for s in first_start.values()
    ]


def closed_messages(snapshot: Snapshot, events: RunEvents | None) -> set[uuid.UUID | None]:
    """The messages a closing decision accounts for. The table keeps one message per decision (the first);
    a run's decision (``lost``) covers all of the run's messages: taken from the run row, and from the
    decision records on the topic, which list them all."""
    closing = [d for d in snapshot.decisions if d.outcome in CLOSING_DECISIONS]
    closed: set[uuid.UUID | None] = {d.message_id for d in closing}
    closing_runs = {d.run_id for d in closing if d.run_id is not None}
    closed |= {m for r in snapshot.runs if r.id in closing_runs for m in r.message_ids}
    if events is not None:
        closed |= {m for d in events.decisions if d.outcome.value in CLOSING_DECISIONS for m in d.message_ids}
    return closed


def judge(
    snapshot: Snapshot,
    events: RunEvents | None = None,
    faults: list[Fault] | None = None,
) -> Verdict:
    verdict = Verdict()
    runs_of: dict[uuid.UUID, list[RunRow]] = defaultdict(list)
    for run in snapshot.runs:
        if answers(run):
            for message in run.message_ids:
                runs_of[message].append(run)
    closed = closed_messages(snapshot, events)
    for message in snapshot.messages:
        answering = runs_of.get(message, [])
        if len(answering) > 1:
            verdict.doubly_answered.append(f"{message}: runs {[describe(r) for r in answering]}")
        elif not answering and message not in closed:
            verdict.lost_messages.append(str(message))
    verdict.non_terminal_runs = [f"{r.id} ({r.status})" for r in snapshot.runs if r.status not in TERMINAL]
    verdict.overlaps_in_table = overlaps(
        (r.conversation_id, r.started_at, r.completed_at, r.id)
        for r in snapshot.runs
        if r.started_at is not None and not r.is_dry_run
    )
    if events is not None:
        closed_at = {r.id: r.completed_at for r in snapshot.runs if r.completed_at is not None}
        verdict.overlaps_in_events = overlaps(
            event_intervals(events.started, events.completed, events.parents, closed_at)
        )
    _judge_replies(snapshot, verdict, runs_of)
    verdict.figures = figures(snapshot, closed, faults or [])
    verdict.figures["messages answered by two runs"] = len(verdict.doubly_answered)
    verdict.figures["messages that got two replies"] = len(verdict.two_replies_one_message)
    return verdict


def _judge_replies(snapshot: Snapshot, verdict: Verdict, runs_of: dict[uuid.UUID, list[RunRow]]) -> None:
    delivered = Counter(r.text for r in snapshot.replies if 200 <= r.status < 300)
    verdict.doubled_replies = [f"{text!r} x{n}" for text, n in delivered.items() if n > 1]
    replied = [r for r in snapshot.runs if r.status == "completed" and r.final_text and not r.is_dry_run]
    texts = {r.final_text for r in replied}
    verdict.stray_replies = [repr(text) for text in delivered if text not in texts]
    states = {(d.run_id, d.kind): d.status for d in snapshot.deliveries}
    for run in replied:
        if delivered[run.final_text or ""] == 0 and states.get((run.id, "reply")) not in RECORDED_UNDELIVERED:
            verdict.missing_replies.append(f"run {run.id}: delivery {states.get((run.id, 'reply'))}")
    for message, answering in runs_of.items():
        count = sum(delivered[r.final_text or ""] for r in answering if r.final_text)
        if count > 1:
            verdict.two_replies_one_message.append(f"{message}: {count} replies")


def figures(snapshot: Snapshot, closed: set[uuid.UUID | None], faults: list[Fault]) -> dict[str, object]:
    outcomes = Counter(d.outcome for d in snapshot.decisions)
    statuses = Counter(r.status for r in snapshot.runs)
    recovered_runs = {d.run_id for d in snapshot.decisions if d.outcome == "recovered"}
    states = Counter(d.status for d in snapshot.deliveries if d.kind == "reply")
    return {
        "messages": len(snapshot.messages),
        "conversations": len({conversation for conversation, _ in snapshot.messages.values()}),
        "runs": len(snapshot.runs),
        "runs by status": dict(statuses),
        "answered by a run": len(set(snapshot.messages) & _answered(snapshot)),
        "closed by a decision": sum(1 for m in snapshot.messages if m in closed),
        "recoveries (runs re-dispatched)": len(recovered_runs),
        "retries (runs with attempt > 1)": sum(1 for r in snapshot.runs if r.attempt > 1),
        "lost decisions (max attempts)": outcomes.get("lost", 0),
        "delivery retries (extra channel calls)": sum(max(0, d.attempts - 1) for d in snapshot.deliveries),
        "replies delivered": sum(1 for r in snapshot.replies if 200 <= r.status < 300),
        "reply deliveries by state": dict(states),
        "decisions by outcome": dict(outcomes),
        "faults": [
            f"{f.target} at {f.at:%H:%M:%S} (ready again after {f.back_after_s:.1f} s"
            + (f"; waited for {', '.join(f'{n} {s} s' for n, s in f.waited_for)}" if f.waited_for else "")
            + (f"; restarted after exiting: {', '.join(f.supervisor_restarts)})" if f.supervisor_restarts else ")")
            for f in faults
        ],
        "max time to recover (s)": max_time_to_recover(snapshot, faults),
    }


def _answered(snapshot: Snapshot) -> set[uuid.UUID]:
    return {m for r in snapshot.runs if answers(r) for m in r.message_ids}


def max_time_to_recover(snapshot: Snapshot, faults: list[Fault]) -> float | None:
    """Per fault: from the fault to the first completed run answering a message received after it; the worst."""
    worst: float | None = None
    for fault in faults:
        after = {m for m, (_, created) in snapshot.messages.items() if created >= fault.at}
        firsts = [
            r.completed_at
            for r in snapshot.runs
            if r.status == "completed" and r.completed_at is not None and after & set(r.message_ids)
        ]
        if firsts:
            took = (min(firsts) - fault.at).total_seconds()
            worst = took if worst is None else max(worst, took)
    return None if worst is None else round(worst, 2)
