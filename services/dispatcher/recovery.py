"""Leases, recovery attempts and lost runs [002 "Discendenza dei tentativi"]: pure functions.

A run holds a lease from the moment it is dispatched; ``run_started`` and every
``run_heartbeats`` record extend it to now + ``DISPATCHER_LEASE_S``. When the lease
lapses, the run is re-dispatched with wake reason ``recovery``, attempt + 1 and the
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


def lease_expired(active: ActiveRun, now: datetime) -> bool:
    return now >= active.lease_expires_at


def extend_lease(active: ActiveRun, now: datetime, lease_s: float) -> None:
    """Push the lease to now + lease (never backwards: a late heartbeat cannot shorten it)."""
    candidate = now + timedelta(seconds=lease_s)
    if candidate > active.lease_expires_at:
        active.lease_expires_at = candidate


def recovery_attempt(active: ActiveRun, now: datetime, lease_s: float) -> ActiveRun:
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
            "lease_expires_at": now + timedelta(seconds=lease_s),
            "started": False,
            "interrupt_requested": False,
        }
    )


def lost_run_completed(state: ConversationState, active: ActiveRun, now: datetime) -> RunCompleted:
    """The ``run_completed`` the dispatcher emits on behalf of a run lost after the last attempt."""
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
        error_message=(
            f"no heartbeat from the runner before the lease expired, {active.attempt} attempt(s); "
            "closed by the dispatcher"
        ),
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


def next_due(state: ConversationState, state_ttl_s: float) -> datetime:
    """When the timer should next look at this conversation: its lease, its deferred
    dispatches' not-before time, or (idle) the end of its state's life."""
    if state.active is not None:
        return state.active.lease_expires_at
    if state.pending:
        return state.not_before or state.updated_at
    return state.updated_at + timedelta(seconds=state_ttl_s)
