"""The chaos verdict on hand-made snapshots: each check fires on what it must catch, and only on that."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from switchboard.contracts import RunStarted, WakeReason
from tests.chaos.checks import event_intervals, judge, overlaps
from tests.chaos.observe import DecisionRow, DeliveryRow, Reply, RunRow, Snapshot

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
CONVERSATION = uuid.uuid4()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(
    messages: list[uuid.UUID],
    start: float,
    end: float | None,
    *,
    status: str = "completed",
    family: str | None = None,
    text: str | None = None,
) -> RunRow:
    return RunRow(
        id=uuid.uuid4(),
        conversation_id=CONVERSATION,
        status=status,
        error_family=family,
        attempt=1,
        parent_run_id=None,
        message_ids=tuple(messages),
        final_text=text if text is not None else (f"reply {uuid.uuid4()}" if status == "completed" else None),
        started_at=at(start),
        completed_at=None if end is None else at(end),
        is_dry_run=False,
    )


def snapshot(
    messages: list[uuid.UUID],
    runs: list[RunRow],
    replies: list[str] | None = None,
    decisions: list[DecisionRow] | None = None,
) -> Snapshot:
    sent = [r.final_text for r in runs if r.status == "completed" and r.final_text] if replies is None else replies
    return Snapshot(
        messages={m: (CONVERSATION, T0) for m in messages},
        runs=runs,
        decisions=decisions or [],
        deliveries=[DeliveryRow(r.id, "reply", "sent", 1) for r in runs if r.status == "completed"],
        replies=[Reply("5511@c.us", text, 201) for text in sent],
    )


def test_a_clean_history_has_no_problem() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    lost_attempt = run([first], 0, 2, status="failed", family="processLost")
    verdict = judge(snapshot([first, second], [lost_attempt, run([first], 3, 4), run([second], 4, 5)]))
    assert verdict.problems() == {} and verdict.settled


def test_a_message_answered_by_two_completed_runs_is_doubled_and_so_are_its_replies() -> None:
    message = uuid.uuid4()
    verdict = judge(snapshot([message], [run([message], 0, 1), run([message], 5, 6)]))
    assert len(verdict.doubly_answered) == 1 and len(verdict.two_replies_one_message) == 1


def test_a_message_without_a_run_is_lost_unless_a_decision_closes_it() -> None:
    message = uuid.uuid4()
    assert judge(snapshot([message], [])).lost_messages == [str(message)]
    closed = [DecisionRow(message, "no_match", None)]
    assert judge(snapshot([message], [], decisions=closed)).lost_messages == []


def test_a_lost_run_decision_closes_every_message_of_the_run() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    gave_up = run([first, second], 0, 1, status="failed", family="processLost")
    verdict = judge(snapshot([first, second], [gave_up], decisions=[DecisionRow(first, "lost", gave_up.id)]))
    assert verdict.lost_messages == []


def test_replies_sent_twice_stray_or_missing_are_caught() -> None:
    message, other = uuid.uuid4(), uuid.uuid4()
    answered = run([message], 0, 1, text="reply A")
    unanswered = run([other], 1, 2, text="reply B")
    verdict = judge(snapshot([message, other], [answered, unanswered], replies=["reply A", "reply A", "reply Z"]))
    assert verdict.doubled_replies == ["'reply A' x2"]
    assert verdict.stray_replies == ["'reply Z'"]
    assert [m.split(":")[0] for m in verdict.missing_replies] == [f"run {unanswered.id}"]
    assert not verdict.settled


def test_runs_that_are_not_terminal_are_reported() -> None:
    message = uuid.uuid4()
    verdict = judge(snapshot([message], [run([message], 0, None, status="running")]))
    assert len(verdict.non_terminal_runs) == 1 and not verdict.settled


def test_overlaps_sees_a_run_started_before_the_previous_one_ended_and_an_open_one() -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert overlaps([(CONVERSATION, at(0), at(2), a), (CONVERSATION, at(2), at(3), b)]) == []
    assert len(overlaps([(CONVERSATION, at(0), at(2), a), (CONVERSATION, at(1), at(3), b)])) == 1
    assert len(overlaps([(CONVERSATION, at(0), None, a), (CONVERSATION, at(5), at(6), b)])) == 1
    # Other conversations never overlap with this one.
    assert overlaps([(CONVERSATION, at(0), at(2), a), (uuid.uuid4(), at(1), at(3), c)]) == []


def test_a_killed_run_ends_when_a_later_attempt_starts_even_if_the_attempt_between_never_started() -> None:
    killed, never_started, recovery = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()

    def started(run_id: uuid.UUID, seconds: float, parent: uuid.UUID | None) -> RunStarted:
        return RunStarted(
            org_id=uuid.uuid4(),
            conversation_id=CONVERSATION,
            run_id=run_id,
            agent_id=uuid.uuid4(),
            version_id=uuid.uuid4(),
            parent_run_id=parent,
            wake_reason=WakeReason.RECOVERY,
            provider="openai",
            model="gpt",
            runner_id="r",
            started_at=at(seconds),
        )

    parents: dict[uuid.UUID, uuid.UUID | None] = {never_started: killed, recovery: never_started}
    spans = event_intervals([started(killed, 0, None), started(recovery, 10, never_started)], [], parents, {})
    assert overlaps(spans) == []
    assert len(overlaps(event_intervals([started(killed, 0, None), started(recovery, 10, None)], [], {}, {}))) == 1
