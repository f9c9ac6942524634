"""Leases, recovery attempts and lost runs [002 "Discendenza dei tentativi"]: pure functions.

A dispatched run nobody has heard of yet holds a *start lease*
(``DISPATCHER_START_LEASE_S``, several leases): it may merely be queued in a lagging
runner's input, and re-dispatching it would only add to that backlog (docs/chaos.md,
finding 2). The first ``run_started`` or ``run_heartbeats`` (the runner heartbeats a run
from acceptance) replaces it with now + ``DISPATCHER_LEASE_S``, and each later one extends
it again. Leases are judged only while the worker is caught up with its input
(:class:`CatchUp`: not within a lease of its start, of a gap in processing or of reading
old records),
so evidence still unread after a restart or a broker outage is not mistaken for silence
(finding 1), and a run whose request still waits in the runners' input
(:func:`waits_in_queue`, ``run_queue.py``) is looked at again a lease later instead of
recovered. When the lease lapses, the run is re-dispatched with wake reason ``recovery``, attempt + 1 and the
lost run as parent; the new attempt answers exactly the same dispatches. After
``DISPATCHER_MAX_ATTEMPTS`` the dispatcher closes the run itself with a
``run_completed`` (status failed, vitality dead, error family ``processLost``), and the
conversation is free again.

Also here: when a conversation next needs the timer (:func:`next_due`), which the
worker's scan uses to send ``dispatcher_ticks``.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from services.dispatcher.state import ActiveRun, ConversationState, derived_id
from switchboard.contracts import (
    ErrorFamily,
    RunCompleted,
    RunStatus,
    Vitality,
    WakeContext,
    WakeReason,
)

LOST_ERROR_CODE = "lease_expired"


def run_id_for(first_dispatch_id: uuid.UUID, parent_run_id: uuid.UUID | None, attempt: int) -> uuid.UUID:
    """The id of the run answering dispatches from ``first_dispatch_id`` (deterministic).

    Equal inputs mean the same run: a run request recomputed after a crash keeps its id,
    so the runner's idempotency on run ids also covers that case.
    """
    return derived_id("run", first_dispatch_id, parent_run_id, attempt)


def start_lease_expiry(now: datetime, lease_s: float, start_lease_s: float) -> datetime:
    """The lease of a run just dispatched: nobody has taken it yet (never shorter than a lease)."""
    return now + timedelta(seconds=max(lease_s, start_lease_s))


def lease_expired(active: ActiveRun, now: datetime) -> bool:
    return now >= active.lease_expires_at


def extend_lease(active: ActiveRun, now: datetime, lease_s: float) -> None:
    """A runner holds the run: the lease runs to now + lease.

    The first sign of life replaces the start lease (even when that shortens it: from now on
    the runner's heartbeats are what keeps it); after that a lease never moves backwards.
    """
    candidate = now + timedelta(seconds=lease_s)
    if not active.started or candidate > active.lease_expires_at:
        active.lease_expires_at = candidate
    active.started = True


def waits_in_queue(active: ActiveRun, now: datetime, queued: bool | None, max_queued_s: float) -> bool:
    """A lapsed lease that should hold: no runner has acknowledged the run and its request still
    waits in the runners' input (``RunQueue.still_queued``), for at most ``max_queued_s`` past
    its dispatch. Not for a run a runner acknowledged: its silence means it was lost."""
    if active.started or queued is not True:
        return False
    return now - active.dispatched_at < timedelta(seconds=max_queued_s)


def deferred_expiry(active: ActiveRun, now: datetime, judge_from: datetime | None) -> datetime | None:
    """A lapsed lease the worker may not judge yet (still catching up): when to look again.

    None: judge it now (the lease has not lapsed, or the worker is caught up).
    """
    if judge_from is None or now >= judge_from or not lease_expired(active, now):
        return None
    return judge_from


def taken_over_unacknowledged(active: ActiveRun, incarnation: str) -> bool:
    """No runner acknowledged the run and another worker incarnation sent its request: that
    worker may have died before the request left, so this one sends it again (once)."""
    return bool(incarnation) and not active.started and active.requested_by != incarnation


class CatchUp:
    """Whether this worker has caught up with its input, so that silence means silence.

    Evidence that a run is alive or done (heartbeats, completions) may still be unread when
    the worker has just started (its backlog: a restart or a rebalance), when it processed
    nothing for more than two leases (the broker was unreachable; one lease of silence is
    what a single dead run looks like, so it is not a gap), or when it reads records produced
    more than a lease ago (a backlog, or records buffered by their producers during an
    outage). After each such sign, leases are not judged for one lease: in effect every
    active lease is extended by one lease. Old records only count for ``max_catch_up_s`` of
    an uninterrupted stretch of them, so a producer whose clock lags cannot suspend
    recovery for good.
    """

    def __init__(self, lease_s: float, max_catch_up_s: float) -> None:
        self._lease = timedelta(seconds=lease_s)
        self._max_catch_up = timedelta(seconds=max_catch_up_s)
        self._last_batch_at: datetime | None = None
        self._stale_since: datetime | None = None
        self._judge_from: datetime | None = None

    def observe(self, now: datetime, oldest_produced_at: datetime | None) -> datetime | None:
        """A batch is processed at ``now``; returns when leases may be judged again (None: now)."""
        # A deferral's end counts as activity: the tick it brings is not a new gap.
        seen = [t for t in (self._last_batch_at, self._judge_from) if t is not None]
        if not seen or now - max(seen) > 2 * self._lease:
            self._defer(now)  # (re)started, or nothing processed for two leases
        if oldest_produced_at is not None and now - oldest_produced_at > self._lease:
            self._stale_since = self._stale_since or now
            if now - self._stale_since <= self._max_catch_up:
                self._defer(now)  # reading a backlog
        else:
            self._stale_since = None
        self._last_batch_at = now
        if self._judge_from is not None and now < self._judge_from:
            return self._judge_from
        return None

    def _defer(self, now: datetime) -> None:
        candidate = now + self._lease
        if self._judge_from is None or candidate > self._judge_from:
            self._judge_from = candidate


def recovery_attempt(active: ActiveRun, now: datetime, lease_s: float, start_lease_s: float) -> ActiveRun:
    """The next attempt of a lost run: same dispatches, attempt + 1, parent = the lost run."""
    first = active.dispatches[0].event_id
    attempt = active.attempt + 1
    return active.model_copy(
        update={
            "run_id": run_id_for(first, active.run_id, attempt),
            "attempt": attempt,
            "parent_run_id": active.run_id,
            "wake_reason": WakeReason.RECOVERY,
            "wake_context": WakeContext(
                message_id=active.wake_context.message_id,
                run_id=active.run_id,
                follow_up_id=active.wake_context.follow_up_id,
                pipeline_run_id=active.wake_context.pipeline_run_id,
                assigned_by_user_id=active.wake_context.assigned_by_user_id,
            ),
            "requested_count": len(active.dispatches),
            "dispatched_at": now,
            "lease_expires_at": start_lease_expiry(now, lease_s, start_lease_s),
            "started": False,
            "interrupt_requested": False,
        }
    )


def lost_run_completed(state: ConversationState, active: ActiveRun, now: datetime, *, why: str) -> RunCompleted:
    """The ``run_completed`` the dispatcher emits on behalf of a run lost after the last attempt;
    ``why`` its last attempt ended (a lapsed lease, or its runner handing it back)."""
    first = active.dispatches[0]
    return RunCompleted(
        event_id=derived_id("lost", active.run_id),
        org_id=state.org_id,
        request_id=first.request_id,
        conversation_id=state.conversation_id,
        contact_id=first.contact_id,
        channel_session_id=first.channel_session_id,
        run_id=active.run_id,
        agent_id=active.agent_id,
        version_id=active.version_id,
        attempt=active.attempt,
        parent_run_id=active.parent_run_id,
        wake_reason=active.wake_reason,
        message_ids=tuple(m.message_id for m in active.messages),
        dispatch_ids=active.dispatch_ids,
        status=RunStatus.FAILED,
        vitality=Vitality.DEAD,
        error_family=ErrorFamily.PROCESS_LOST,
        error_code=LOST_ERROR_CODE,
        error_message=f"{why}, {active.attempt} attempt(s); closed by the dispatcher",
        summary="The run's process was lost; nothing was sent.",
        provider=active.provider,
        model=active.model,
        tokens_in=0,
        tokens_out=0,
        cost_micro_usd=0,
        latency_ms=max(0, int((now - active.dispatched_at).total_seconds() * 1000)),
        steps=0,
        dry_run=False,
        started_at=active.dispatched_at,
        completed_at=now,
    )


def next_due(state: ConversationState, state_ttl_s: float, incarnation: str = "") -> datetime:
    """When the timer should next look at this conversation: at once for a run whose request
    ``incarnation`` must send again (:func:`taken_over_unacknowledged`), else its lease, its
    deferred dispatches' not-before time, or (idle) the end of its state's life."""
    if state.active is not None:
        if taken_over_unacknowledged(state.active, incarnation):
            return state.active.dispatched_at  # in the past: the next tick
        return state.active.lease_expires_at
    if state.pending:
        return state.not_before or state.updated_at
    return state.updated_at + timedelta(seconds=state_ttl_s)
