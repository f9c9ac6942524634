"""The conversation state machine: policies, run life cycle, limits, idempotency (pure)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from services.dispatcher import recovery
from services.dispatcher.agents import AgentIndex
from services.dispatcher.limits import Admission
from services.dispatcher.policy import PolicyConfig, apply
from services.dispatcher.state import ConversationState, Transition
from switchboard.contracts import (
    ConcurrencyPolicy,
    DispatchDecided,
    DispatcherTick,
    DispatchOutcome,
    ErrorFamily,
    PublishedChange,
    Record,
    RunCompleted,
    RunRequested,
    RunStatus,
    SteeringKind,
    SteeringMessage,
    Topics,
    TriggerConfig,
    WakeReason,
)
from tests.unit.dispatcher.builders import (
    CONVERSATION,
    ORG,
    T0,
    completed,
    context,
    dispatch,
    granted,
    heartbeat,
    index_of,
    published,
    snapshot,
    started,
)

FAST = PolicyConfig(lease_s=30.0, start_lease_s=30.0, max_attempts=3, reply_interval_s=0.0)
FIVE_S = PolicyConfig(lease_s=30.0, max_attempts=3, reply_interval_s=5.0)


def tick(at: datetime) -> DispatcherTick:
    return DispatcherTick(org_id=ORG, conversation_id=CONVERSATION, due_at=at, worker_id="test")


class Conv:
    """Drives one conversation through the state machine, keeping its state between events."""

    def __init__(self, index: AgentIndex, config: PolicyConfig = FAST) -> None:
        self.index = index
        self.config = config
        self.state: ConversationState | None = None

    def send(
        self,
        record: Record,
        *,
        at: datetime = T0,
        admission: Admission | None = None,
        over_budget: dict[uuid.UUID, str] | None = None,
    ) -> Transition:
        ctx = context(self.index, now=at, admission=admission, config=self.config, over_budget=over_budget)
        # Round-trip through bytes, as the table does: what is not serialized is not state.
        state = ConversationState.from_bytes(self.state.to_bytes()) if self.state is not None else None
        result = apply(state, record, ctx)
        self.state = result.state
        return result

    @property
    def active(self):  # type: ignore[no-untyped-def]
        assert self.state is not None
        return self.state.active


def outcomes(t: Transition) -> list[DispatchOutcome]:
    return [d.outcome for d in t.decisions]


def runs(t: Transition) -> list[RunRequested]:
    return [e.record for e in t.outputs if e.topic is Topics.RUN_REQUESTED]  # type: ignore[misc]


def steering(t: Transition) -> list[SteeringMessage]:
    return [e.record for e in t.outputs if e.topic is Topics.STEERING]  # type: ignore[misc]


def start_busy(policy: ConcurrencyPolicy, config: PolicyConfig = FAST) -> tuple[Conv, RunRequested]:
    conv = Conv(index_of(snapshot(1, policy=policy)), config)
    first = conv.send(dispatch("primeira"))
    assert outcomes(first) == [DispatchOutcome.DISPATCHED]
    (run,) = runs(first)
    return conv, run


# --------------------------------------------------------------------------- a table: one message while busy


@dataclass(frozen=True)
class BusyCase:
    policy: ConcurrencyPolicy
    outcome: DispatchOutcome
    steering_kind: SteeringKind | None
    pending: int
    run_dispatches: int


BUSY_CASES = [
    BusyCase(ConcurrencyPolicy.ENQUEUE, DispatchOutcome.QUEUED, None, 1, 1),
    BusyCase(ConcurrencyPolicy.STEER, DispatchOutcome.STEERED, SteeringKind.GUIDANCE, 0, 2),
    BusyCase(ConcurrencyPolicy.INTERRUPT, DispatchOutcome.INTERRUPTED, SteeringKind.INTERRUPT, 1, 1),
    BusyCase(ConcurrencyPolicy.REJECT, DispatchOutcome.CONV_BUSY, None, 0, 1),
]


@pytest.mark.parametrize("case", BUSY_CASES, ids=lambda c: c.policy.value)
def test_a_message_for_a_busy_conversation_follows_the_active_runs_policy(case: BusyCase) -> None:
    conv, run = start_busy(case.policy)
    second = conv.send(dispatch("segunda"), at=T0 + timedelta(seconds=1))
    assert outcomes(second) == [case.outcome]
    assert second.decisions[0].run_id == run.run_id  # the decision names the run it met
    assert runs(second) == [], "never a second run while one is active"
    kinds = [s.kind for s in steering(second)]
    assert kinds == ([case.steering_kind] if case.steering_kind else [])
    for message in steering(second):
        assert message.run_id == run.run_id
    assert conv.state is not None
    assert len(conv.state.pending) == case.pending
    assert len(conv.active.dispatches) == case.run_dispatches


def test_free_conversation_dispatches_at_once_with_a_fresh_run() -> None:
    conv = Conv(index_of(snapshot(1)))
    d = dispatch()
    t = conv.send(d)
    (run,) = runs(t)
    assert (run.attempt, run.parent_run_id, run.wake_reason) == (1, None, WakeReason.USER_MESSAGE)
    assert run.messages == (d.message,) and run.dispatch_ids == (d.event_id,)
    assert conv.active.run_id == run.run_id
    assert conv.active.lease_expires_at == T0 + timedelta(seconds=30)
    (decision,) = t.decisions
    assert (decision.outcome, decision.run_id, decision.agent_id) == (
        DispatchOutcome.DISPATCHED,
        run.run_id,
        run.agent_id,
    )
    assert t.arrivals == [DispatchOutcome.DISPATCHED]


def test_no_match_records_why_each_candidate_was_rejected() -> None:
    from switchboard.contracts import TriggerConfig

    conv = Conv(index_of(snapshot(1, trigger=TriggerConfig(event_types=("message",), keyword_regex="boleto"))))
    t = conv.send(dispatch("quero agendar"))
    (decision,) = t.decisions
    assert decision.outcome is DispatchOutcome.NO_MATCH and decision.run_id is None
    assert '"result":"keyword_regex"' in decision.details_json
    assert conv.state is not None and conv.state.active is None


# --------------------------------------------------------------------------- enqueue: coalescing


def test_enqueue_coalesces_waiting_messages_into_one_follow_up_run() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    waiting = [dispatch(f"m{i}") for i in range(3)]
    for i, d in enumerate(waiting):
        assert outcomes(conv.send(d, at=T0 + timedelta(seconds=i + 1))) == [DispatchOutcome.QUEUED]
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=10))
    (follow_up,) = runs(done)
    assert follow_up.messages == tuple(d.message for d in waiting)
    assert follow_up.dispatch_ids == tuple(d.event_id for d in waiting)
    assert outcomes(done) == [DispatchOutcome.DISPATCHED] * 3
    assert {d.run_id for d in done.decisions} == {follow_up.run_id}
    assert follow_up.run_id != run.run_id and follow_up.attempt == 1 and follow_up.parent_run_id is None
    assert conv.state is not None and conv.state.pending == []
    # ... and when that one completes with nothing waiting, the conversation is free.
    free = conv.send(completed(follow_up.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=20))
    assert runs(free) == [] and conv.state is not None and conv.state.active is None


def test_queued_messages_go_to_another_agent_when_theirs_was_paused_meanwhile() -> None:
    first, second = snapshot(1, priority=10), snapshot(2)
    conv = Conv(index_of(first, second))
    (run,) = runs(conv.send(dispatch("a")))
    conv.send(dispatch("b"))
    conv.index.apply(published(first, change=PublishedChange.PAUSED))
    (follow_up,) = runs(conv.send(completed(run.run_id, run.agent_id, run.version_id)))
    assert follow_up.agent_id == second.agent_id


def test_queued_messages_get_no_match_when_no_agent_is_left() -> None:
    only = snapshot(1)
    conv = Conv(index_of(only))
    (run,) = runs(conv.send(dispatch("a")))
    conv.send(dispatch("b"))
    conv.index.apply(published(only, change=PublishedChange.ARCHIVED))
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id))
    assert runs(done) == [] and outcomes(done) == [DispatchOutcome.NO_MATCH]


# --------------------------------------------------------------------------- steer


def test_steer_a_message_the_run_never_consumed_gets_a_follow_up_run() -> None:
    conv, run = start_busy(ConcurrencyPolicy.STEER)
    late = dispatch("e amanhã?")
    conv.send(late)
    first_message = run.messages[0].message_id
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id, message_ids=(first_message,)))
    (follow_up,) = runs(done)
    assert follow_up.messages == (late.message,)


@pytest.mark.parametrize("listed", ["all", "none"])
def test_steer_a_consumed_or_unreported_message_is_answered_by_the_run(listed: str) -> None:
    conv, run = start_busy(ConcurrencyPolicy.STEER)
    late = dispatch("e amanhã?")
    conv.send(late)
    assert late.message is not None
    ids = (run.messages[0].message_id, late.message.message_id) if listed == "all" else ()
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id, message_ids=ids))
    assert runs(done) == []


def test_steer_into_a_run_with_no_message_of_its_own_that_never_took_it_in_gets_a_follow_up_run() -> None:
    """A follow-up (no customer message) is running; the customer writes and is steered into it;
    the run ends before its next turn boundary. It lists no message — nothing it took in — and
    that is news here (the run had none of its own), so the message is answered by a next run."""
    trigger = TriggerConfig(event_types=("message", "follow_up"))
    conv = Conv(index_of(snapshot(1, trigger=trigger, policy=ConcurrencyPolicy.STEER)), FAST)
    (run,) = runs(conv.send(dispatch(wake=WakeReason.FOLLOW_UP, target=snapshot(1).agent_id)))
    late = dispatch("oi, ainda tem horário?")
    assert outcomes(conv.send(late, at=T0 + timedelta(seconds=1))) == [DispatchOutcome.STEERED]
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=2))
    (follow_up,) = runs(done)
    assert follow_up.messages == (late.message,)


def test_steer_without_a_message_is_queued() -> None:
    conv, _ = start_busy(ConcurrencyPolicy.STEER)
    t = conv.send(dispatch(wake=WakeReason.ASSIGNMENT, target=snapshot(1).agent_id))
    assert outcomes(t) == [DispatchOutcome.QUEUED]


def test_a_recovery_attempt_answers_steered_messages_too() -> None:
    conv, run = start_busy(ConcurrencyPolicy.STEER)
    late = dispatch("e amanhã?")
    conv.send(late)
    (retry,) = runs(conv.send(tick(T0), at=T0 + timedelta(seconds=31)))
    assert retry.messages == (run.messages[0], late.message)


# --------------------------------------------------------------------------- interrupt


def test_interrupt_stops_once_then_one_new_run_answers_every_message() -> None:
    conv, run = start_busy(ConcurrencyPolicy.INTERRUPT)
    b, c = dispatch("b"), dispatch("c")
    first = conv.send(b)
    second = conv.send(c)
    assert [s.kind for s in steering(first)] == [SteeringKind.INTERRUPT]
    assert steering(second) == [], "one interrupt per run"
    assert outcomes(second) == [DispatchOutcome.INTERRUPTED]
    stopped = conv.send(
        completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.ABORTED, abort_reason="interrupted")
    )
    (restart,) = runs(stopped)
    assert restart.messages == (run.messages[0], b.message, c.message)
    assert restart.parent_run_id == run.run_id, "the new run continues the interrupted one"
    assert restart.attempt == 1


def test_interrupt_that_came_too_late_only_answers_the_new_messages() -> None:
    conv, run = start_busy(ConcurrencyPolicy.INTERRUPT)
    b = dispatch("b")
    conv.send(b)
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.COMPLETED))
    (follow_up,) = runs(done)
    assert follow_up.messages == (b.message,) and follow_up.parent_run_id is None


# --------------------------------------------------------------------------- reject, handoff, dry runs, budget


def test_reject_keeps_nothing_and_the_run_completes_alone() -> None:
    conv, run = start_busy(ConcurrencyPolicy.REJECT)
    conv.send(dispatch("b"))
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id))
    assert runs(done) == [] and outcomes(done) == []


def test_a_handoff_leaves_waiting_messages_to_the_humans() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    conv.send(dispatch("b"))
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.HANDOFF))
    assert runs(done) == []
    assert outcomes(done) == [DispatchOutcome.CONV_BUSY]
    assert done.decisions[0].reason == "conversation handed off to humans"


def test_dry_runs_bypass_the_busy_check_and_are_not_tracked() -> None:
    conv, run = start_busy(ConcurrencyPolicy.REJECT)
    t = conv.send(dispatch("teste", dry_run=True))
    (dry,) = runs(t)
    assert dry.dry_run and dry.run_id != run.run_id
    assert outcomes(t) == [DispatchOutcome.DISPATCHED] and t.decisions[0].dry_run
    assert t.arrivals == [], "tests do not count in the no-match rate"
    assert conv.active.run_id == run.run_id, "the live run stays the active one"
    # Its life cycle events change nothing.
    conv.send(completed(dry.run_id, dry.agent_id, dry.version_id, dry_run=True))
    assert conv.active.run_id == run.run_id


def test_dry_run_of_a_draft_version() -> None:
    draft = uuid.uuid4()
    conv = Conv(index_of(snapshot(1)))
    (run,) = runs(conv.send(dispatch(dry_run=True, target=snapshot(1).agent_id, target_version=draft)))
    assert run.version_id == draft and run.dry_run


@pytest.mark.parametrize("dry_run", [False, True])
def test_over_budget_refuses_and_keeps_nothing(dry_run: bool) -> None:
    conv = Conv(index_of(snapshot(1)))
    t = conv.send(dispatch(dry_run=dry_run), over_budget={ORG: "cost"})
    assert runs(t) == [] and outcomes(t) == [DispatchOutcome.BUDGET_EXCEEDED]
    assert "cost" in (t.decisions[0].reason or "")
    assert conv.state is not None and conv.state.pending == [] and conv.state.active is None


def test_queued_messages_are_refused_when_the_budget_ran_out_meanwhile() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    conv.send(dispatch("b"))
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id), over_budget={ORG: "tokens"})
    assert runs(done) == [] and outcomes(done) == [DispatchOutcome.BUDGET_EXCEEDED]


# --------------------------------------------------------------------------- idempotency


def test_a_replayed_dispatch_changes_nothing() -> None:
    conv = Conv(index_of(snapshot(1)))
    d = dispatch()
    conv.send(d)
    before = conv.state.to_bytes() if conv.state else b""
    again = conv.send(d, at=T0 + timedelta(seconds=2))
    assert runs(again) == [] and again.decisions == []
    assert conv.state is not None
    assert conv.state.model_copy(update={"updated_at": T0}).to_bytes() == before


def test_the_same_message_under_another_event_id_is_the_same_dispatch() -> None:
    conv = Conv(index_of(snapshot(1)))
    d = dispatch()
    conv.send(d)
    twin = d.model_copy(update={"event_id": uuid.uuid4()})
    assert conv.send(twin).decisions == []


@pytest.mark.parametrize("late", ["started", "heartbeat", "completed"])
def test_events_of_a_closed_run_change_nothing(late: str) -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    conv.send(completed(run.run_id, run.agent_id, run.version_id))
    (second,) = runs(conv.send(dispatch("b"), at=T0 + timedelta(seconds=1)))
    lease = conv.active.lease_expires_at
    event = {
        "started": started(run.run_id, run.agent_id, run.version_id),
        "heartbeat": heartbeat(run.run_id, run.agent_id),
        "completed": completed(run.run_id, run.agent_id, run.version_id),
    }[late]
    t = conv.send(event, at=T0 + timedelta(seconds=20))
    assert t.decisions == [] and t.outputs == []
    assert conv.active.run_id == second.run_id and conv.active.lease_expires_at == lease


def test_replayed_run_started_is_harmless() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    for _ in range(2):
        assert conv.send(started(run.run_id, run.agent_id, run.version_id)).outputs == []
    assert conv.active.started


def test_recomputing_from_the_same_state_yields_the_same_ids() -> None:
    index = index_of(snapshot(1))
    d = dispatch()
    a = apply(None, d, context(index))
    b = apply(None, d, context(index))
    assert [r.run_id for r in runs(a)] == [r.run_id for r in runs(b)]
    assert [x.event_id for x in a.decisions] == [x.event_id for x in b.decisions]


def test_events_about_an_unknown_conversation_create_no_state() -> None:
    for event in (tick(T0), heartbeat(uuid.uuid4(), uuid.uuid4())):
        t = apply(None, event, context(AgentIndex()))
        assert t.state is None and t.outputs == [] and t.decisions == []


# --------------------------------------------------------------------------- leases and recovery


def test_a_heartbeat_extends_the_lease() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    conv.send(started(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=1))
    conv.send(heartbeat(run.run_id, run.agent_id), at=T0 + timedelta(seconds=25))
    assert conv.active.lease_expires_at == T0 + timedelta(seconds=55)
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=40)).outputs == []


def test_lease_expiry_recovers_with_attempt_plus_one_and_the_parent_then_process_lost() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    waiting = dispatch("b")
    conv.send(waiting)
    lineage = [run]
    at = T0
    for attempt in (2, 3):
        at += timedelta(seconds=31)
        t = conv.send(tick(at), at=at)
        (retry,) = runs(t)
        assert (retry.attempt, retry.parent_run_id) == (attempt, lineage[-1].run_id)
        assert retry.wake_reason is WakeReason.RECOVERY and retry.wake_context.run_id == lineage[-1].run_id
        assert retry.messages == run.messages, "the same messages, not the waiting ones"
        assert outcomes(t) == [DispatchOutcome.RECOVERED]
        details = json.loads(t.decisions[0].details_json)
        assert details["ended_run_id"] == str(lineage[-1].run_id)
        assert datetime.fromisoformat(details["lease_expired_at"]) <= at, "the lapsed lease, not the new one"
        lineage.append(retry)
    at += timedelta(seconds=31)
    t = conv.send(tick(at), at=at)
    lost = [e.record for e in t.outputs if e.topic is Topics.RUN_COMPLETED]
    assert len(lost) == 1 and isinstance(lost[0], RunCompleted)
    assert (lost[0].run_id, lost[0].status, lost[0].error_family) == (
        lineage[-1].run_id,
        RunStatus.FAILED,
        ErrorFamily.PROCESS_LOST,
    )
    assert lost[0].attempt == 3
    # The conversation is free again, and what waited is dispatched at once.
    (follow_up,) = runs(t)
    assert follow_up.messages == (waiting.message,)
    assert outcomes(t) == [DispatchOutcome.LOST, DispatchOutcome.DISPATCHED]
    # A late completion of any lost attempt changes nothing.
    for old in lineage:
        assert conv.send(completed(old.run_id, old.agent_id, old.version_id), at=at).outputs == []


def test_a_run_handed_back_by_its_runner_is_recovered_at_once() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    handed_back = completed(
        run.run_id, run.agent_id, run.version_id, status=RunStatus.FAILED, error_family=ErrorFamily.PROCESS_LOST
    )
    t = conv.send(handed_back, at=T0 + timedelta(seconds=2))
    (retry,) = runs(t)
    assert (retry.attempt, retry.parent_run_id) == (2, run.run_id)
    details = json.loads(t.decisions[0].details_json)
    assert "lease_expired_at" not in details, "no lease lapsed: the runner handed the run back"
    assert t.decisions[0].reason == "the runner handed the run back"


def test_attempts_handed_back_at_a_stop_do_not_use_up_the_runs_attempts() -> None:
    """Rolling deploys hand the run back three times (each runner stops before it finished): that
    is not the run's failure, so it is recovered again each time — and three real losses after
    that still close it as lost (DISPATCHER_MAX_ATTEMPTS counts only those)."""
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    at = T0
    current = run
    for _ in range(3):  # three stops in a row
        at += timedelta(seconds=2)
        back = completed(
            current.run_id,
            current.agent_id,
            current.version_id,
            status=RunStatus.FAILED,
            error_family=ErrorFamily.PROCESS_LOST,
        ).model_copy(update={"error_code": "runner_shutdown"})
        (current,) = runs(conv.send(back, at=at))
    assert current.attempt == 4 and conv.active.handbacks == 3
    for expected in (5, 6):  # two real losses (leases lapsed): recovered again
        at += timedelta(minutes=5)
        (current,) = runs(conv.send(tick(at), at=at))
        assert current.attempt == expected
    at += timedelta(minutes=5)
    t = conv.send(tick(at), at=at)
    assert runs(t) == [] and outcomes(t)[0] == DispatchOutcome.LOST, "the third real loss closes it"


def test_a_tick_before_the_lease_expires_does_nothing() -> None:
    conv, _ = start_busy(ConcurrencyPolicy.ENQUEUE)
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=29)).outputs == []


# --------------------------------------------------------------------------- taking a conversation over

SENDER = dataclasses.replace(FAST, incarnation="worker-a/1")
SUCCESSOR = dataclasses.replace(FAST, incarnation="worker-b/2")


def test_a_worker_taking_over_an_unacknowledged_run_sends_the_same_request_once() -> None:
    conv, run = start_busy(ConcurrencyPolicy.STEER, SENDER)
    conv.send(dispatch("e amanhã?"))  # steered in: never part of the request
    conv.config = SUCCESSOR  # the sender died; this worker recovered the table
    t = conv.send(tick(T0), at=T0 + timedelta(seconds=2))
    (again,) = runs(t)
    same = ("event_id", "run_id", "attempt", "parent_run_id", "messages", "dispatch_ids", "wake_reason", "agent_id")
    assert {f: getattr(again, f) for f in same} == {f: getattr(run, f) for f in same}
    assert outcomes(t) == [], "the same run again, not a new decision"
    assert conv.active.lease_expires_at == T0 + timedelta(seconds=32), "the start lease runs from the re-send"
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=3)).outputs == [], "once"


def test_a_run_a_runner_acknowledged_is_not_sent_again_by_the_worker_taking_over() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE, SENDER)
    conv.send(started(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=1))
    conv.config = SUCCESSOR
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=2)).outputs == []


def test_the_worker_that_sent_a_request_never_sends_it_again() -> None:
    conv, _ = start_busy(ConcurrencyPolicy.ENQUEUE, SENDER)
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=2)).outputs == []


def test_a_run_taken_over_is_due_at_once_and_then_at_its_lease() -> None:
    conv, _ = start_busy(ConcurrencyPolicy.ENQUEUE, SENDER)
    assert conv.state is not None
    assert recovery.next_due(conv.state, 3600, SENDER.incarnation) == conv.active.lease_expires_at
    assert recovery.next_due(conv.state, 3600, SUCCESSOR.incarnation) == conv.active.dispatched_at
    conv.config = SUCCESSOR
    conv.send(tick(T0), at=T0 + timedelta(seconds=2))
    assert recovery.next_due(conv.state, 3600, SUCCESSOR.incarnation) == conv.active.lease_expires_at


def test_a_recovery_attempt_is_the_recovering_workers_request() -> None:
    conv, _ = start_busy(ConcurrencyPolicy.ENQUEUE, SENDER)
    conv.config = SUCCESSOR
    conv.send(tick(T0), at=T0 + timedelta(seconds=2))  # re-sent: lease now T0 + 32 s
    (retry,) = runs(conv.send(tick(T0), at=T0 + timedelta(seconds=33)))
    assert retry.attempt == 2
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=34)).outputs == [], "its own request: not re-sent"


# --------------------------------------------------------------------------- limits: 5 s rule, org rate limit


def test_one_reply_per_agent_and_conversation_per_five_seconds() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE, FIVE_S)
    conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=1))
    early = conv.send(dispatch("b"), at=T0 + timedelta(seconds=2))
    assert runs(early) == [] and outcomes(early) == [DispatchOutcome.RATE_LIMITED]
    assert early.decisions[0].not_before == T0 + timedelta(seconds=5)
    joined = conv.send(dispatch("c"), at=T0 + timedelta(seconds=3))
    assert runs(joined) == [] and outcomes(joined) == [DispatchOutcome.RATE_LIMITED]
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=4)).outputs == []
    due = conv.send(tick(T0), at=T0 + timedelta(seconds=5))
    (run2,) = runs(due)
    assert len(run2.messages) == 2
    assert outcomes(due) == [DispatchOutcome.DISPATCHED] * 2


def test_enqueued_follow_up_waits_for_the_five_second_rule() -> None:
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE, FIVE_S)
    conv.send(dispatch("b"), at=T0 + timedelta(seconds=1))
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=2))
    assert runs(done) == [] and outcomes(done) == [DispatchOutcome.RATE_LIMITED]
    assert len(runs(conv.send(tick(T0), at=T0 + timedelta(seconds=5)))) == 1


def test_org_rate_limit_defers_and_retries_never_drops() -> None:
    conv = Conv(index_of(snapshot(1)))
    window_end = T0 + timedelta(seconds=60)
    refused = conv.send(dispatch("a"), admission=granted(0, window_end=window_end))
    assert runs(refused) == [] and outcomes(refused) == [DispatchOutcome.RATE_LIMITED]
    assert refused.decisions[0].not_before == window_end
    assert conv.state is not None and conv.state.not_before == window_end
    # Still refused at the retry: no second rate_limited record for the same dispatch.
    again = conv.send(tick(T0), at=window_end, admission=granted(0, window_end=window_end + timedelta(seconds=60)))
    assert again.decisions == [] and conv.state is not None and len(conv.state.pending) == 1
    later = window_end + timedelta(seconds=60)
    admitted = conv.send(tick(T0), at=later, admission=granted(1, window_end=later + timedelta(seconds=60)))
    assert len(runs(admitted)) == 1 and outcomes(admitted) == [DispatchOutcome.DISPATCHED]


def test_admission_counts_demand_per_org_and_stops_at_the_grant() -> None:
    unlimited = Admission.unlimited()
    assert all(unlimited.try_take(ORG) for _ in range(5)) and unlimited.demand == {ORG: 5}
    limited = granted(2)
    assert [limited.try_take(ORG) for _ in range(3)] == [True, True, False]
    mark = limited.checkpoint()
    limited.try_take(ORG)
    limited.rollback(mark)
    assert limited.demand == {ORG: 3}


def test_recovery_is_not_charged_to_the_rate_limit() -> None:
    conv, _ = start_busy(ConcurrencyPolicy.ENQUEUE)
    t = conv.send(tick(T0), at=T0 + timedelta(seconds=31), admission=granted(0))
    assert len(runs(t)) == 1


# --------------------------------------------------------------------------- state life


def test_an_idle_conversation_is_forgotten_after_its_ttl() -> None:
    config = PolicyConfig(lease_s=30, max_attempts=3, reply_interval_s=0, state_ttl_s=3600)
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE, config)
    conv.send(completed(run.run_id, run.agent_id, run.version_id))
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=3599)).state is not None
    assert conv.send(tick(T0), at=T0 + timedelta(seconds=3601)).state is None


def test_decisions_carry_org_conversation_message_and_deterministic_ids() -> None:
    conv = Conv(index_of(snapshot(1)))
    d = dispatch()
    (decision,) = conv.send(d).decisions
    assert isinstance(decision, DispatchDecided)
    assert (decision.org_id, decision.conversation_id, decision.dispatch_event_id) == (ORG, CONVERSATION, d.event_id)
    assert d.message is not None and decision.message_ids == (d.message.message_id,)


# --------------------------------------------------------------------------- wakes aimed at an agent


@pytest.mark.parametrize("policy", list(ConcurrencyPolicy), ids=lambda p: p.value)
def test_wakes_aimed_at_other_agents_wait_and_each_gets_its_own_run(policy: ConcurrencyPolicy) -> None:
    """The daily analysis fans out one targeted wake per agent into one internal conversation:
    every agent runs once, whatever the active run's policy (none is steered, interrupted or
    refused on another agent's behalf), and no run answers a wake meant for another agent."""
    agents = [snapshot(n, policy=policy) for n in (1, 2, 3)]
    conv = Conv(index_of(*agents))
    wakes = [dispatch(wake=WakeReason.FOLLOW_UP, target=a.agent_id) for a in agents]
    (run,) = runs(conv.send(wakes[0]))
    assert run.agent_id == agents[0].agent_id
    for wake in wakes[1:]:
        t = conv.send(wake, at=T0 + timedelta(seconds=1))
        assert outcomes(t) == [DispatchOutcome.QUEUED] and steering(t) == []
    started_agents = [run.agent_id]
    for step in range(2):
        done = conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=10 + step))
        (run,) = runs(done)
        assert run.dispatch_ids == (wakes[step + 1].event_id,), "one run per targeted wake"
        assert outcomes(done) == [DispatchOutcome.DISPATCHED]
        started_agents.append(run.agent_id)
    assert started_agents == [a.agent_id for a in agents]
    last = conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=20))
    assert runs(last) == [] and conv.state is not None and conv.state.pending == []


def test_a_customer_message_queued_with_another_agents_wake_waits_for_its_own_agent() -> None:
    """A run answers what selection gives its agent: another agent's wake does not take the
    customer's message along (that agent's trigger may not even accept it)."""
    chosen, other = snapshot(1, priority=10), snapshot(2)
    conv = Conv(index_of(chosen, other))
    (run,) = runs(conv.send(dispatch("oi")))
    aimed = dispatch(wake=WakeReason.FOLLOW_UP, target=other.agent_id)
    message = dispatch("ainda aí?")
    conv.send(aimed, at=T0 + timedelta(seconds=1))
    conv.send(message, at=T0 + timedelta(seconds=2))
    (wake_run,) = runs(conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=5)))
    assert wake_run.agent_id == other.agent_id and wake_run.dispatch_ids == (aimed.event_id,)
    done = conv.send(completed(wake_run.run_id, other.agent_id, other.version_id), at=T0 + timedelta(seconds=9))
    (answer,) = runs(done)
    assert answer.agent_id == chosen.agent_id and answer.dispatch_ids == (message.event_id,)


def test_a_message_whose_agent_excluded_itself_is_never_folded_into_that_agents_run() -> None:
    """A classification re-dispatch excludes the agent that refused the messages: a run of that
    agent, started for another pending message, must not take it back (it would refuse it again,
    and the same re-dispatch would be dropped as already seen)."""
    first, second = snapshot(1, priority=10), snapshot(2)
    conv = Conv(index_of(first, second))
    (run,) = runs(conv.send(dispatch("oi")))
    refused = dispatch("quero um orçamento").model_copy(update={"excluded_agent_ids": (first.agent_id,)})
    later = dispatch("e o prazo?")
    conv.send(refused, at=T0 + timedelta(seconds=1))
    conv.send(later, at=T0 + timedelta(seconds=2))
    (follow_up,) = runs(conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=5)))
    assert follow_up.agent_id == second.agent_id and follow_up.dispatch_ids == (refused.event_id,)
    done = conv.send(completed(follow_up.run_id, second.agent_id, second.version_id), at=T0 + timedelta(seconds=9))
    (last,) = runs(done)
    assert last.agent_id == first.agent_id and last.dispatch_ids == (later.event_id,)


def test_a_named_version_of_a_paused_or_archived_agent_runs_no_more_unless_dry() -> None:
    """A /goal segment or an approval resume names the version that began the work; an agent
    paused meanwhile (by its owner or its budget) must not keep spending through it."""
    agent = snapshot(1)
    conv = Conv(index_of(agent))
    conv.index.apply(published(agent, change=PublishedChange.PAUSED))
    segment = dispatch(wake=WakeReason.FOLLOW_UP, target=agent.agent_id, target_version=agent.version_id)
    t = conv.send(segment)
    assert runs(t) == [] and outcomes(t) == [DispatchOutcome.NO_MATCH]
    assert t.decisions[0].reason == "target agent is not published"
    test = dispatch(dry_run=True, target=agent.agent_id, target_version=agent.version_id)
    assert len(runs(conv.send(test))) == 1, "a dry-run test of a paused agent's version still runs"


def test_a_named_older_version_of_a_published_agent_finishes_its_work() -> None:
    agent = snapshot(1)
    older = uuid.uuid4()
    conv = Conv(index_of(agent))
    (run,) = runs(conv.send(dispatch(wake=WakeReason.FOLLOW_UP, target=agent.agent_id, target_version=older)))
    assert run.version_id == older


# --------------------------------------------------------------------------- scheduled work while busy


@pytest.mark.parametrize("wake", [WakeReason.PIPELINE_STEP, WakeReason.FOLLOW_UP])
def test_a_scheduled_wake_for_a_busy_conversation_waits_even_under_reject(wake: WakeReason) -> None:
    """``reject`` turns away a customer writing over a run. A goal's next segment (queued by the
    segment itself, so it nearly always arrives while that run is still active) or a due follow-up
    is the platform's own work: it waits for the run to end. Rejected, every /goal ended after its
    first segment and a follow-up marked fired never went out."""
    conv, run = start_busy(ConcurrencyPolicy.REJECT)
    agent = run.agent_id
    scheduled = dispatch(wake=wake, target=agent, target_version=run.version_id)
    assert outcomes(conv.send(scheduled, at=T0 + timedelta(seconds=1))) == [DispatchOutcome.QUEUED]
    turned_away = conv.send(dispatch("ainda aí?"), at=T0 + timedelta(seconds=2))
    assert outcomes(turned_away) == [DispatchOutcome.CONV_BUSY], "a customer's message still follows the policy"
    (next_run,) = runs(conv.send(completed(run.run_id, agent, run.version_id), at=T0 + timedelta(seconds=5)))
    assert next_run.wake_reason is wake and next_run.dispatch_ids == (scheduled.event_id,)


@pytest.mark.parametrize("wake_first", [False, True], ids=["message_first", "wake_first"])
def test_a_goals_next_segment_is_never_folded_into_a_run_of_customer_messages(wake_first: bool) -> None:
    """The customer wrote while a goal's segment ran, and the segment queued the next one: two runs,
    in arrival order — the message answered as a reply, the segment run as a segment (wake reason
    ``pipelineStep``). Merged, the run took the message's reason, the goal's segment never ran and
    the goal stayed active for good."""
    conv, run = start_busy(ConcurrencyPolicy.ENQUEUE)
    segment = dispatch(wake=WakeReason.PIPELINE_STEP, target=run.agent_id, target_version=run.version_id)
    message = dispatch("e o preço?")
    for n, queued in enumerate((segment, message) if wake_first else (message, segment)):
        assert outcomes(conv.send(queued, at=T0 + timedelta(seconds=1 + n))) == [DispatchOutcome.QUEUED]
    (first,) = runs(conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=5)))
    (second,) = runs(conv.send(completed(first.run_id, first.agent_id, first.version_id), at=T0 + timedelta(seconds=9)))
    by_reason = {r.wake_reason: r.dispatch_ids for r in (first, second)}
    assert by_reason == {
        WakeReason.PIPELINE_STEP: (segment.event_id,),
        WakeReason.USER_MESSAGE: (message.event_id,),
    }
    assert first.wake_reason is (WakeReason.PIPELINE_STEP if wake_first else WakeReason.USER_MESSAGE)
