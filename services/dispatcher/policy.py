"""The conversation state machine: concurrency policies, run life cycle, limits (pure).

``apply(state, record, ctx)`` folds one event of a conversation into its state and says
what to emit. Events: ``dispatch_requested``, ``run_started``, ``run_heartbeats``,
``run_completed`` and ``dispatcher_ticks``. No broker and no database: the context
carries the clock, the published-agent index, the budget view and the batch's admission.

A conversation is *busy* while it has an active run. A dispatch for a busy
conversation is handled by the active run's concurrency policy (the run is what gets
steered or interrupted):

============ ==============================================================================
enqueue      kept in ``pending``; when the active run ends, one follow-up run answers all
             pending dispatches together (decision ``queued``)
steer        sent on ``steering`` to the active run as guidance and added to the run's
             dispatches (a recovery attempt answers it too) (decision ``steered``); a
             dispatch without a message cannot steer and is queued
interrupt    kept in ``pending``; the active run is asked to stop (one ``interrupt`` per
             run); when it ends aborted, a new run answers its messages and every
             pending one (decision ``interrupted``)
reject       decision ``conv_busy``, nothing else (the seed's behavior)
============ ==============================================================================

Dry runs bypass the busy check [004 §3.4]: they are dispatched at once and not tracked.
A conversation that is not busy but has pending dispatches (a limit deferred them)
coalesces new ones into the same upcoming run.

Starting a run checks, in order: the org's monthly budget (``budget_exceeded`` for every
pending dispatch), one reply per agent and conversation per ``reply_interval_s``, and the
org's rate limit (both defer: ``rate_limited``, retried by a tick, never dropped).

Idempotency: a dispatch already seen (same message id, or same event id without a
message) changes nothing; events of a closed or unknown run change nothing. Run ids and
decision ids are derived from their inputs, so recomputing after a crash yields the same
ids.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.dispatcher import recovery
from services.dispatcher.agents import AgentIndex
from services.dispatcher.limits import Admission, BudgetView, reply_not_before
from services.dispatcher.selection import Choice, Selection, select
from services.dispatcher.state import (
    ActiveRun,
    ConversationState,
    Emit,
    PendingDispatch,
    Transition,
    dedupe_key,
    derived_id,
    messages_of,
)
from switchboard.contracts import (
    ConcurrencyPolicy,
    DispatchDecided,
    DispatcherTick,
    DispatchOutcome,
    DispatchRequested,
    ErrorFamily,
    Record,
    RunCompleted,
    RunHeartbeat,
    RunRequested,
    RunStarted,
    RunStatus,
    SteeringKind,
    SteeringMessage,
    Topics,
    WakeReason,
)
from switchboard.observability.logging import get_logger
from switchboard.run_outcomes import INTERRUPTED, RUNNER_SHUTDOWN, WITH_HUMANS

log = get_logger(__name__)

HANDED_OFF_REASON = "conversation handed off to humans"
# Attempts handed back at a stop that a run may have beyond DISPATCHER_MAX_ATTEMPTS: a bound, so a
# run no runner can ever finish within its stop grace is still closed one day.
MAX_HANDBACKS = 10
INTERRUPT_TEXT = "A new customer message arrived: stop at this turn boundary; a new run will answer every message."


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    lease_s: float = 30.0
    # The lease of a run no runner has acknowledged yet (it may be queued in a lagging runner).
    start_lease_s: float = 120.0
    max_attempts: int = 3
    reply_interval_s: float = 5.0
    state_ttl_s: float = 24 * 3600.0
    # This worker process, unique per start: a run whose request another incarnation sent and no
    # runner acknowledged is re-sent once by the incarnation that takes its conversation over.
    incarnation: str = ""
    # How long past its dispatch a run whose request still waits in the runners' input may hold
    # off its recovery (run_queue.py); after that the start lease decides, as without the check.
    max_queued_s: float = 600.0


def queue_unknown(run_id: uuid.UUID) -> bool | None:
    """No run-queue check: every answer is unknown (the start lease decides)."""
    return None


@dataclass(slots=True)
class Context:
    """Everything a decision may depend on besides the state and the event."""

    now: datetime
    index: AgentIndex
    budgets: BudgetView
    admission: Admission
    config: PolicyConfig
    # Leases are not judged before this time: the worker is still catching up with its input.
    judge_leases_from: datetime | None = None
    # Whether a run's request still waits in the runners' input (True), was taken (False), or
    # unknown (None): ``RunQueue.still_queued``.
    queued: Callable[[uuid.UUID], bool | None] = queue_unknown


class UnknownEvent(TypeError):
    """A record type the state machine does not handle (a wiring error)."""


def conversation_of(record: Record) -> tuple[uuid.UUID, uuid.UUID]:
    """(org id, conversation id) of an event the state machine handles."""
    if not isinstance(record, DispatchRequested | RunStarted | RunHeartbeat | RunCompleted | DispatcherTick):
        raise UnknownEvent(type(record).__name__)
    return record.org_id, record.conversation_id


def apply(state: ConversationState | None, record: Record, ctx: Context) -> Transition:
    """Fold one event into the conversation's state. ``state`` is consumed (mutated).

    Returns the new state (None: forget the conversation) plus decisions and outputs.
    """
    org_id, conversation_id = conversation_of(record)
    if state is None:
        if not isinstance(record, DispatchRequested):
            # Only a dispatch creates a conversation's state; anything else about an
            # unknown conversation is late or foreign, and changes nothing.
            return Transition(None)
        state = ConversationState.empty(org_id, conversation_id, ctx.now)
    t = Transition(state)
    if isinstance(record, DispatchRequested):
        first = len(t.decisions)
        changed = on_dispatch(state, record, ctx, t)
        if not record.dry_run:
            t.arrivals.extend(d.outcome for d in t.decisions[first:] if d.dispatch_event_id == record.event_id)
            del t.arrivals[1:]
    elif isinstance(record, RunStarted | RunHeartbeat):
        changed = on_run_alive(state, record.run_id, record.dry_run, ctx)
    elif isinstance(record, RunCompleted):
        changed = on_run_completed(state, record, ctx, t)
    else:
        on_tick(state, ctx, t)
        # A tick that found nothing to do is not activity: it must not keep an idle state alive.
        changed = bool(t.decisions or t.outputs)
    if t.state is not None and changed:
        t.state.updated_at = ctx.now
    return t


# --------------------------------------------------------------------------- decisions


def _decision(
    state: ConversationState,
    dispatch: DispatchRequested,
    outcome: DispatchOutcome,
    ctx: Context,
    *,
    choice: Choice | None = None,
    run: ActiveRun | None = None,
    run_id: uuid.UUID | None = None,
    reason: str | None = None,
    not_before: datetime | None = None,
    details: dict[str, Any] | None = None,
) -> DispatchDecided:
    run_id = run.run_id if run is not None else run_id
    agent_id = run.agent_id if run is not None else (choice.agent_id if choice else None)
    version_id = run.version_id if run is not None else (choice.version_id if choice else None)
    return DispatchDecided(
        event_id=derived_id("decision", dispatch.event_id, outcome.value, run_id),
        occurred_at=ctx.now,
        org_id=state.org_id,
        request_id=dispatch.request_id,
        conversation_id=state.conversation_id,
        dispatch_event_id=dispatch.event_id,
        outcome=outcome,
        message_ids=(dispatch.message.message_id,) if dispatch.message is not None else (),
        dispatch_ids=(dispatch.event_id,),
        agent_id=agent_id,
        version_id=version_id,
        run_id=run_id,
        attempt=run.attempt if run is not None else None,
        parent_run_id=run.parent_run_id if run is not None else None,
        wake_reason=dispatch.wake_reason,
        dry_run=dispatch.dry_run,
        reason=reason,
        not_before=not_before,
        details_json=json.dumps(details or {}, separators=(",", ":"), default=str),
    )


def _run_decision(
    state: ConversationState,
    run: ActiveRun,
    outcome: DispatchOutcome,
    ctx: Context,
    *,
    reason: str,
    ended: ActiveRun,
    lease_expired: bool,
) -> DispatchDecided:
    """A decision about a whole run (recovered, lost): every message and dispatch it answers.
    ``ended`` is the attempt that stopped; its lease is in the details only when it lapsed."""
    details: dict[str, Any] = {"ended_run_id": str(ended.run_id), "ended_attempt": ended.attempt}
    if lease_expired:
        details["lease_expired_at"] = ended.lease_expires_at.isoformat()
    first = run.dispatches[0]
    return DispatchDecided(
        event_id=derived_id("decision", first.event_id, outcome.value, run.run_id),
        occurred_at=ctx.now,
        org_id=state.org_id,
        request_id=first.request_id,
        conversation_id=state.conversation_id,
        dispatch_event_id=first.event_id,
        outcome=outcome,
        message_ids=tuple(m.message_id for m in run.messages),
        dispatch_ids=run.dispatch_ids,
        agent_id=run.agent_id,
        version_id=run.version_id,
        run_id=run.run_id,
        attempt=run.attempt,
        parent_run_id=run.parent_run_id,
        wake_reason=run.wake_reason,
        reason=reason,
        details_json=json.dumps(details, separators=(",", ":")),
    )


def _considered(selection: Selection) -> dict[str, Any]:
    return {"candidates": [{"agent_id": str(a), "result": r} for a, r in selection.considered[:20]]}


# --------------------------------------------------------------------------- dispatches


def on_dispatch(state: ConversationState, dispatch: DispatchRequested, ctx: Context, t: Transition) -> bool:
    """Handle a dispatch request; False when it was already handled (nothing changed)."""
    key = dedupe_key(dispatch)
    if dispatch.excluded_agent_ids:  # a classification re-dispatch of a seen message is a new request
        key += ":x:" + ",".join(sorted(str(a) for a in dispatch.excluded_agent_ids))
    if state.has_seen(key):
        return False  # a replay, or the same message dispatched twice: already handled
    state.remember(key)
    _handle_dispatch(state, dispatch, ctx, t)
    return True


def _is_handback(dispatch: DispatchRequested) -> bool:
    """The API's handback: an assignment that resumes no parked run (an approval's resume names
    its run, and is not one: the humans still own the chat)."""
    return (
        not dispatch.dry_run and dispatch.wake_reason is WakeReason.ASSIGNMENT and dispatch.wake_context.run_id is None
    )


def _handle_dispatch(state: ConversationState, dispatch: DispatchRequested, ctx: Context, t: Transition) -> None:
    if _is_handback(dispatch):
        # Remembered whatever this dispatch's outcome (no agent may listen to assignment): a
        # handoff outcome of a run dispatched before it arrives late, and must not undo it.
        state.handed_back_at = ctx.now
    if state.human_owned and not dispatch.dry_run:
        if not _is_handback(dispatch):
            t.decisions.append(_decision(state, dispatch, DispatchOutcome.CONV_BUSY, ctx, reason=HANDED_OFF_REASON))
            return
        state.human_owned = False  # handed back: this dispatch wakes the agents again
    selection = select(ctx.index, dispatch)
    if selection.choice is None:
        t.decisions.append(
            _decision(
                state, dispatch, DispatchOutcome.NO_MATCH, ctx, reason=selection.reason, details=_considered(selection)
            )
        )
        return
    choice = selection.choice
    if dispatch.dry_run:
        _dispatch_dry_run(state, dispatch, choice, ctx, t)
        return
    active = state.active
    if active is not None:
        _while_busy(state, active, dispatch, choice, ctx, t)
        return
    if state.pending:
        # Not busy, but earlier dispatches wait for a limit: this one joins their run.
        state.pending.append(PendingDispatch(dispatch=dispatch, queued_at=ctx.now, deferral_reported=True))
        t.decisions.append(
            _decision(
                state,
                dispatch,
                DispatchOutcome.RATE_LIMITED,
                ctx,
                choice=choice,
                reason="joins dispatches deferred by a rate limit",
                not_before=state.not_before,
            )
        )
        return
    state.pending = [PendingDispatch(dispatch=dispatch, queued_at=ctx.now)]
    _try_start(state, ctx, t, choice=choice)


def _dispatch_dry_run(
    state: ConversationState, dispatch: DispatchRequested, choice: Choice, ctx: Context, t: Transition
) -> None:
    exceeded = ctx.budgets.exceeded(state.org_id)
    if exceeded is not None:
        t.decisions.append(
            _decision(
                state,
                dispatch,
                DispatchOutcome.BUDGET_EXCEEDED,
                ctx,
                choice=choice,
                reason=f"monthly {exceeded} cap of the organization reached",
            )
        )
        return
    run_id = recovery.run_id_for(dispatch.event_id, None, 1)
    t.outputs.append(Emit(Topics.RUN_REQUESTED, _run_requested(state, [dispatch], choice, run_id, 1, None, ctx)))
    t.decisions.append(
        _decision(
            state,
            dispatch,
            DispatchOutcome.DISPATCHED,
            ctx,
            choice=choice,
            run_id=run_id,
            reason="dry run: busy check bypassed",
        )
    )


def _while_busy(
    state: ConversationState,
    active: ActiveRun,
    dispatch: DispatchRequested,
    choice: Choice,
    ctx: Context,
    t: Transition,
) -> None:
    # The active run's policy is about messages for the active agent. A re-dispatch from the
    # active run itself (its classification filter did not match) and a wake aimed at another
    # agent (the daily analysis fan-out, another agent's follow-up) wait for it to end instead.
    # A wake (no customer message: a goal's next segment, a follow-up, a hand-back) is work the
    # platform scheduled, not a customer writing over a run: it waits too, whatever the policy —
    # rejected, a goal ended after its first segment and a due follow-up was lost (2026-12-05).
    for_another_agent = dispatch.target_agent_id is not None and dispatch.target_agent_id != active.agent_id
    policy = (
        ConcurrencyPolicy.ENQUEUE
        if for_another_agent or active.agent_id in dispatch.excluded_agent_ids or dispatch.message is None
        else active.policy
    )
    details = {"policy": policy.value, "chosen_agent_id": str(choice.agent_id)}
    if policy is ConcurrencyPolicy.REJECT:
        t.decisions.append(
            _decision(
                state,
                dispatch,
                DispatchOutcome.CONV_BUSY,
                ctx,
                run=active,
                reason="conversation has an active run",
                details=details,
            )
        )
        return
    if policy is ConcurrencyPolicy.STEER and dispatch.message is not None:
        active.dispatches.append(dispatch)
        t.outputs.append(
            Emit(
                Topics.STEERING,
                SteeringMessage(
                    event_id=derived_id("steer", active.run_id, dispatch.event_id),
                    occurred_at=ctx.now,
                    org_id=state.org_id,
                    request_id=dispatch.request_id,
                    conversation_id=state.conversation_id,
                    run_id=active.run_id,
                    kind=SteeringKind.GUIDANCE,
                    text=dispatch.message.text,
                    source_message=dispatch.message,
                ),
            )
        )
        t.decisions.append(
            _decision(
                state,
                dispatch,
                DispatchOutcome.STEERED,
                ctx,
                run=active,
                reason="sent to the active run",
                details=details,
            )
        )
        return
    state.pending.append(PendingDispatch(dispatch=dispatch, queued_at=ctx.now))
    if policy is ConcurrencyPolicy.INTERRUPT:
        if not active.interrupt_requested:
            active.interrupt_requested = True
            t.outputs.append(
                Emit(
                    Topics.STEERING,
                    SteeringMessage(
                        event_id=derived_id("interrupt", active.run_id),
                        occurred_at=ctx.now,
                        org_id=state.org_id,
                        request_id=dispatch.request_id,
                        conversation_id=state.conversation_id,
                        run_id=active.run_id,
                        kind=SteeringKind.INTERRUPT,
                        text=INTERRUPT_TEXT,
                        source_message=dispatch.message,
                    ),
                )
            )
        t.decisions.append(
            _decision(
                state,
                dispatch,
                DispatchOutcome.INTERRUPTED,
                ctx,
                run=active,
                reason="active run asked to stop; a new run will answer every pending message",
                details=details,
            )
        )
        return
    t.decisions.append(
        _decision(
            state,
            dispatch,
            DispatchOutcome.QUEUED,
            ctx,
            run=active,
            reason="waits for the active run; answered by one follow-up run",
            details=details,
        )
    )


# --------------------------------------------------------------------------- starting runs


def _choose_for_pending(state: ConversationState, ctx: Context) -> tuple[Choice | None, Selection | None]:
    """The agent for the next run: the first pending dispatch (oldest first) that still selects one.

    Selection is redone at start time so an agent paused or archived meanwhile is never chosen.
    """
    last: Selection | None = None
    for item in state.pending:
        selection = select(ctx.index, item.dispatch)
        if selection.choice is not None:
            return selection.choice, selection
        last = selection
    return None, last


def _try_start(state: ConversationState, ctx: Context, t: Transition, *, choice: Choice | None = None) -> None:
    """Start one run answering every pending dispatch, unless a budget or a limit says no."""
    if not state.pending or state.active is not None:
        return
    selection: Selection | None = None
    if choice is None:
        choice, selection = _choose_for_pending(state, ctx)
    if choice is None:
        for item in state.pending:
            t.decisions.append(
                _decision(
                    state,
                    item.dispatch,
                    DispatchOutcome.NO_MATCH,
                    ctx,
                    reason="no agent matches any more (paused, archived or republished)",
                    details=_considered(selection) if selection else None,
                )
            )
        _drop_pending(state)
        return
    exceeded = ctx.budgets.exceeded(state.org_id)
    if exceeded is not None:
        for item in state.pending:
            t.decisions.append(
                _decision(
                    state,
                    item.dispatch,
                    DispatchOutcome.BUDGET_EXCEEDED,
                    ctx,
                    choice=choice,
                    reason=f"monthly {exceeded} cap of the organization reached",
                    details={"budget_read_at": ctx.budgets.read_at.isoformat() if ctx.budgets.read_at else None},
                )
            )
        _drop_pending(state)
        return
    wait_until = reply_not_before(state.last_run_at, choice.agent_id, ctx.now, ctx.config.reply_interval_s)
    if wait_until is not None:
        _defer(
            state, ctx, t, choice, wait_until, "one reply per agent and conversation per interval", "agent_conversation"
        )
        return
    if not ctx.admission.try_take(state.org_id):
        retry_at = ctx.admission.retry_at(state.org_id, ctx.now)
        _defer(state, ctx, t, choice, retry_at, "organization rate limit reached for this window", "org")
        return
    # One run answers what its agent may answer: a wake aimed at another agent waits for its own run.
    answered = _one_runs_worth([item for item in state.pending if _answerable_by(item.dispatch, choice.agent_id, ctx)])
    taken = {id(item) for item in answered}
    later = [item for item in state.pending if id(item) not in taken]
    dispatches = [item.dispatch for item in answered]
    first = dispatches[0]
    parent = state.continues_run_id
    run_id = recovery.run_id_for(first.event_id, parent, 1)
    run = ActiveRun(
        run_id=run_id,
        agent_id=choice.agent_id,
        version_id=choice.version_id,
        policy=choice.policy,
        provider=choice.provider,
        model=choice.model,
        attempt=1,
        parent_run_id=parent,
        wake_reason=first.wake_reason,
        wake_context=first.wake_context,
        dispatches=dispatches,
        requested_count=len(dispatches),
        dispatched_at=ctx.now,
        lease_expires_at=recovery.start_lease_expiry(ctx.now, ctx.config.lease_s, ctx.config.start_lease_s),
        requested_by=ctx.config.incarnation,
    )
    state.active = run
    state.pending = later
    state.not_before = None
    state.continues_run_id = None
    state.last_run_at[str(choice.agent_id)] = ctx.now
    t.outputs.append(Emit(Topics.RUN_REQUESTED, _run_requested(state, dispatches, choice, run_id, 1, parent, ctx)))
    coalesced = len(dispatches)
    for dispatch in dispatches:
        t.decisions.append(
            _decision(
                state,
                dispatch,
                DispatchOutcome.DISPATCHED,
                ctx,
                run=run,
                reason=None if coalesced == 1 else f"one run answers {coalesced} waiting messages",
            )
        )


# Wakes that carry their own work: the run must see them as what they are (its wake reason and
# context), so they are never folded into a run of customer messages, nor one into another.
_RUNS_ALONE = frozenset({WakeReason.PIPELINE_STEP, WakeReason.FOLLOW_UP, WakeReason.CHILD_COMPLETED})


def _one_runs_worth(answerable: list[PendingDispatch]) -> list[PendingDispatch]:
    """What one run takes of the answerable pending items, oldest first: a goal's next segment, a
    follow-up or a sub-agent's result alone; otherwise every item but those (customer messages
    coalesce, and a hand-back's wake with them). Merged, a goal's segment ran as a plain reply with
    the customer's message first — the goal never ended — and a follow-up lost its reason."""
    if answerable[0].dispatch.wake_reason in _RUNS_ALONE:
        return answerable[:1]
    return [item for item in answerable if item.dispatch.wake_reason not in _RUNS_ALONE]


def _answerable_by(dispatch: DispatchRequested, agent_id: uuid.UUID, ctx: Context) -> bool:
    """Whether a run of ``agent_id`` answers ``dispatch``: a wake aimed at it; or a dispatch aimed
    at no one that selection gives to it, or to no agent at all any more (its agent was paused
    meanwhile: the run answering the conversation takes it). Never an agent that excluded itself
    (a classification re-dispatch), and never another agent's wake or pick."""
    if dispatch.target_agent_id is not None:
        return dispatch.target_agent_id == agent_id
    if agent_id in dispatch.excluded_agent_ids:
        return False
    chosen = select(ctx.index, dispatch).choice
    return chosen is None or chosen.agent_id == agent_id


def _defer(
    state: ConversationState, ctx: Context, t: Transition, choice: Choice, until: datetime, reason: str, limit: str
) -> None:
    state.not_before = until
    for item in state.pending:
        if item.deferral_reported:
            continue
        item.deferral_reported = True
        t.decisions.append(
            _decision(
                state,
                item.dispatch,
                DispatchOutcome.RATE_LIMITED,
                ctx,
                choice=choice,
                reason=reason,
                not_before=until,
                details={"limit": limit},
            )
        )


def _run_requested(
    state: ConversationState,
    dispatches: list[DispatchRequested],
    choice: Choice,
    run_id: uuid.UUID,
    attempt: int,
    parent: uuid.UUID | None,
    ctx: Context,
) -> RunRequested:
    first = dispatches[0]
    return RunRequested(
        event_id=derived_id("run_requested", run_id),
        occurred_at=ctx.now,
        org_id=state.org_id,
        request_id=first.request_id,
        conversation_id=state.conversation_id,
        contact_id=first.contact_id,
        channel_session_id=first.channel_session_id,
        run_id=run_id,
        agent_id=choice.agent_id,
        version_id=choice.version_id,
        attempt=attempt,
        parent_run_id=parent,
        wake_reason=first.wake_reason,
        wake_context=first.wake_context,
        messages=tuple(d.message for d in dispatches if d.message is not None),
        dispatch_ids=tuple(d.event_id for d in dispatches),
        dry_run=first.dry_run,
    )


def _request_of(state: ConversationState, run: ActiveRun, ctx: Context) -> RunRequested:
    """The run request of an active run, rebuilt from the state: a recovery attempt's, or the same
    request again (same event id) for a run whose first request may never have left."""
    first = run.dispatches[0]
    requested = run.dispatches[: run.requested_count]  # the ones steered in later were never in it
    return RunRequested(
        event_id=derived_id("run_requested", run.run_id),
        occurred_at=ctx.now,
        org_id=state.org_id,
        request_id=first.request_id,
        conversation_id=state.conversation_id,
        contact_id=first.contact_id,
        channel_session_id=first.channel_session_id,
        run_id=run.run_id,
        agent_id=run.agent_id,
        version_id=run.version_id,
        attempt=run.attempt,
        parent_run_id=run.parent_run_id,
        wake_reason=run.wake_reason,
        wake_context=run.wake_context,
        messages=messages_of(requested),
        dispatch_ids=tuple(d.event_id for d in requested),
        dry_run=False,
    )


# --------------------------------------------------------------------------- run life cycle


def on_run_alive(state: ConversationState, run_id: uuid.UUID, dry_run: bool, ctx: Context) -> bool:
    """run_started or a heartbeat: the active run's runner holds it; extend its lease."""
    active = state.active
    if dry_run or active is None or active.run_id != run_id:
        return False  # dry runs are not tracked; a closed or superseded run's heartbeat is late
    recovery.extend_lease(active, ctx.now, ctx.config.lease_s)
    return True


def on_run_completed(state: ConversationState, completed: RunCompleted, ctx: Context, t: Transition) -> bool:
    """The active run ended: free the conversation and start what waits. False: not the active run."""
    active = state.active
    if completed.dry_run or active is None or active.run_id != completed.run_id:
        if not completed.dry_run and not state.is_closed(completed.run_id):
            state.close_run(completed.run_id)  # a superseded attempt finished late: remember, ignore
        return False
    if completed.error_family is ErrorFamily.PROCESS_LOST and completed.status is RunStatus.FAILED:
        # The runner handed the run back (shutdown): recover now instead of waiting for the lease.
        _lose_or_recover(
            state,
            active,
            ctx,
            t,
            reason="the runner handed the run back",
            lease_expired=False,
            handed_back=completed.error_code == RUNNER_SHUTDOWN,
        )
        return True
    state.close_run(active.run_id)
    state.active = None
    carried: list[PendingDispatch] = []
    # Stopped by our interrupt, not aborted for another reason while the interrupt was on its
    # way (a classification refusal re-dispatched its messages to the next agent already).
    interrupted = (
        active.interrupt_requested and completed.status is RunStatus.ABORTED and completed.abort_reason == INTERRUPTED
    )
    own_messages = any(d.message is not None for d in active.dispatches[: active.requested_count])
    if interrupted:
        # Stopped by our interrupt before answering: its messages go into the next run, first.
        carried = [PendingDispatch(dispatch=d, queued_at=ctx.now, deferral_reported=True) for d in active.dispatches]
    elif completed.message_ids or not own_messages:
        # A steered message the run never consumed (it ended first) gets a follow-up run.
        # Judged when the runner lists what it answered, or when the run had no message of its
        # own (a follow-up, a handback): then an empty list means it took in none. (A run with
        # messages and an empty list is from a runner before the list existed: it says nothing.)
        answered = set(completed.message_ids)
        carried = [
            PendingDispatch(dispatch=d, queued_at=ctx.now, deferral_reported=True)
            for d in active.dispatches[active.requested_count :]
            if d.message is not None and d.message.message_id not in answered
        ]
    people_took_it = completed.status is RunStatus.HANDOFF or (
        completed.status is RunStatus.ABORTED and completed.abort_reason == WITH_HUMANS
    )
    if people_took_it and not _handed_back_during(state, active):
        # Humans own the conversation now (the run handed it off, or found a person had taken it
        # over): no agent answers what was waiting, nor what comes next.
        state.human_owned = True
        for item in [*carried, *state.pending]:
            t.decisions.append(
                _decision(state, item.dispatch, DispatchOutcome.CONV_BUSY, ctx, reason=HANDED_OFF_REASON)
            )
        _drop_pending(state)
        return True
    if carried:
        state.pending = [*carried, *state.pending]
    if interrupted:
        # The run that re-answers the interrupted run's messages continues it (lineage).
        state.continues_run_id = active.run_id
    _start_due(state, ctx, t)
    return True


def _handed_back_during(state: ConversationState, run: ActiveRun) -> bool:
    """A handback arrived after ``run`` was dispatched: the people gave the conversation back
    before this run's handoff outcome reached us (the topics are not ordered with each other),
    so it is the agents' again."""
    return state.handed_back_at is not None and state.handed_back_at >= run.dispatched_at


def _drop_pending(state: ConversationState) -> None:
    state.pending = []
    state.not_before = None
    state.continues_run_id = None


def _start_due(state: ConversationState, ctx: Context, t: Transition) -> None:
    """Start the pending dispatches unless a limit deferred them past now."""
    if not state.pending:
        return
    if state.not_before is not None and state.not_before > ctx.now:
        return
    _try_start(state, ctx, t)


def _lose_or_recover(
    state: ConversationState,
    active: ActiveRun,
    ctx: Context,
    t: Transition,
    *,
    reason: str,
    lease_expired: bool,
    handed_back: bool = False,
) -> None:
    """Another attempt while the run has attempts left, else ``lost``. An attempt its runner handed
    back at a stop does not count (up to ``MAX_HANDBACKS``): a rolling deploy of the runners is not
    the run's failure, and three of them (or one, with a scale-down after it) used to lose it."""
    state.close_run(active.run_id)
    handbacks = active.handbacks + (1 if handed_back else 0)
    counted = active.attempt - handbacks
    if counted < ctx.config.max_attempts and handbacks <= MAX_HANDBACKS:
        attempt = recovery.recovery_attempt(active, ctx.now, ctx.config.lease_s, ctx.config.start_lease_s)
        attempt.handbacks = handbacks
        attempt.requested_by = ctx.config.incarnation
        state.active = attempt
        t.outputs.append(Emit(Topics.RUN_REQUESTED, _request_of(state, attempt, ctx)))
        t.decisions.append(
            _run_decision(
                state,
                attempt,
                DispatchOutcome.RECOVERED,
                ctx,
                reason=reason,
                ended=active,
                lease_expired=lease_expired,
            )
        )
        return
    state.active = None
    t.outputs.append(Emit(Topics.RUN_COMPLETED, recovery.lost_run_completed(state, active, ctx.now, why=reason)))
    t.decisions.append(
        _run_decision(
            state,
            active,
            DispatchOutcome.LOST,
            ctx,
            reason=f"{reason}; {active.attempt} attempt(s): processLost",
            ended=active,
            lease_expired=lease_expired,
        )
    )
    _start_due(state, ctx, t)


def _resend_request(state: ConversationState, active: ActiveRun, ctx: Context, t: Transition) -> None:
    """Send again the request of a run this worker took over and no runner acknowledged.

    Its sender may have crashed between writing the state and sending the request (the
    processor's step 4 → 5), which left the conversation waiting for the start lease (two
    minutes). The same request again costs nothing if the first did leave: same run id, same
    event id, and the runner runs a run id once. The lease restarts from the re-send."""
    active.requested_by = ctx.config.incarnation
    active.lease_expires_at = max(
        active.lease_expires_at,
        recovery.start_lease_expiry(ctx.now, ctx.config.lease_s, ctx.config.start_lease_s),
    )
    t.outputs.append(Emit(Topics.RUN_REQUESTED, _request_of(state, active, ctx)))
    log.info(
        "run request re-sent after taking the conversation over",
        extra={"run_id": str(active.run_id), "conversation_id": str(state.conversation_id), "attempt": active.attempt},
    )


def on_tick(state: ConversationState, ctx: Context, t: Transition) -> None:
    """The timer found something due: a lapsed lease, a deferred dispatch, or an idle state to drop."""
    active = state.active
    if active is not None:
        if recovery.taken_over_unacknowledged(active, ctx.config.incarnation):
            _resend_request(state, active, ctx, t)
            return
        deferred = recovery.deferred_expiry(active, ctx.now, ctx.judge_leases_from)
        if deferred is not None:
            active.lease_expires_at = deferred  # catching up: look again when the input is read
        elif recovery.lease_expired(active, ctx.now) and recovery.waits_in_queue(
            active, ctx.now, ctx.queued(active.run_id), ctx.config.max_queued_s
        ):
            # No runner has taken the request yet: a recovery would queue behind it. Look again in a lease.
            active.lease_expires_at = ctx.now + timedelta(seconds=ctx.config.lease_s)
        elif recovery.lease_expired(active, ctx.now):
            _lose_or_recover(
                state,
                active,
                ctx,
                t,
                reason="no heartbeat from the runner before the lease expired",
                lease_expired=True,
            )
        return
    if state.pending:
        _start_due(state, ctx, t)
        return
    if ctx.now - state.updated_at >= timedelta(seconds=ctx.config.state_ttl_s):
        if state.human_owned:
            state.updated_at = ctx.now  # still the humans': keep the flag, look again a TTL later
            return
        t.state = None  # idle long enough: forget the conversation (a tombstone in the changelog)
