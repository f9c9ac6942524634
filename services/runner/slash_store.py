"""The database side of slash commands in the runner: conversation modes, skill bodies, goals.

Every write runs in its own tenant transaction. A goal's segment is accounted exactly once
(the goal row is locked and ``last_run_id`` names the segment already counted), and the
wake of the next segment (``dispatch_requested``, ``pipelineStep``) goes to the outbox in
the same transaction as the goal's new state, after the conversation row is locked (outbox
writers of one conversation serialize on it).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.runner.goals import SEGMENT_BUDGET_MICROS, GoalState, Verdict
from services.runner.outcome import LoopOutcome
from services.runner.preload import MISSING, read_once
from services.runner.subject import RunSubject
from switchboard.contracts import DispatchRequested, RunRequested, Serde, Topics, WakeContext
from switchboard.contracts.enums import WakeReason
from switchboard.db.models import AiAgentRun, Conversation
from switchboard.db.models.slash import AgentSkill, ConversationGoal, ConversationModeRow, GoalStatus
from switchboard.db.outbox import enqueue_record
from switchboard.db.session import async_tenant_transaction

# Event ids of segment wakes: uuid5(namespace, "<goal id>:<segment number>") — a retried write is one event.
SEGMENT_WAKE_NAMESPACE: Final = uuid.UUID("a4d3b8e2-61f0-4c9a-9b1e-7c2d5e8f0a13")
MODE_KEY: Final = "conversation_mode"


async def _read_mode(session: AsyncSession, subject: RunSubject) -> str | None:
    request = subject.request
    mode: str | None = await session.scalar(
        select(ConversationModeRow.mode).where(
            ConversationModeRow.org_id == request.org_id,
            ConversationModeRow.conversation_id == request.conversation_id,
        )
    )
    return mode


class ModePreload:
    """The conversation's mode, read with the run's subject (services/runner/preload.py)."""

    key = MODE_KEY
    sql = "SELECT m.mode FROM conversation_modes AS m WHERE m.org_id = :org_id AND m.conversation_id = :conversation_id"

    def params(self, request: RunRequested) -> Mapping[str, Any]:
        return {}

    def parse(self, value: Any, subject: RunSubject) -> object:
        return MISSING if subject.conversation is None else value


def _state(row: ConversationGoal) -> GoalState:
    return GoalState(
        id=row.id,
        kind=row.kind,
        goal=row.goal,
        budget_micros=row.budget_micros,
        segment_budget_micros=row.segment_budget_micros,
        spent_micros=row.spent_micros,
        segments=row.segments,
    )


class SlashStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], serde: Serde) -> None:
        self._sessions = sessions
        self._serde = serde

    # ------------------------------------------------------------------ modes

    async def mode(self, subject: RunSubject) -> str | None:
        """The conversation's mode (None: reply), preloaded with the run when it can be."""

        async def read() -> str | None:
            async with self._sessions() as session, async_tenant_transaction(session, subject.request.org_id):
                return await _read_mode(session, subject)

        return await read_once(subject, MODE_KEY, read)

    async def set_mode(self, subject: RunSubject, mode: str | None) -> None:
        """Switch the conversation to ``mode``; None: back to the default (reply)."""
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            if mode is None:
                await session.execute(
                    delete(ConversationModeRow).where(
                        ConversationModeRow.org_id == request.org_id,
                        ConversationModeRow.conversation_id == request.conversation_id,
                    )
                )
                return
            await session.execute(
                insert(ConversationModeRow)
                .values(
                    org_id=request.org_id,
                    conversation_id=request.conversation_id,
                    mode=mode,
                    set_by_run_id=request.run_id,
                )
                .on_conflict_do_update(
                    index_elements=[ConversationModeRow.conversation_id],
                    set_={"mode": mode, "set_by_run_id": request.run_id},
                )
            )

    # ------------------------------------------------------------------ skills

    async def skill_body(self, subject: RunSubject, name: str) -> str | None:
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            return await session.scalar(
                select(AgentSkill.body).where(AgentSkill.org_id == request.org_id, AgentSkill.name == name)
            )

    # ------------------------------------------------------------------ goals

    async def start_goal(self, subject: RunSubject, *, kind: str, goal: str, budget_micros: int) -> GoalState:
        """The goal this run starts (the same one again for a redelivered run); an active goal of the
        conversation is stopped first — a new /goal replaces it."""
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            # The same one again for a redelivered run, or for the recovery of the run that started
            # it (its runner died): a recovery must not replace the goal with a fresh one at spent 0.
            lineage = [request.run_id, *await _ancestors(session, request)]
            existing = await session.scalar(
                select(ConversationGoal)
                .where(
                    ConversationGoal.org_id == request.org_id,
                    ConversationGoal.started_by_run_id.in_(lineage),
                )
                .order_by(ConversationGoal.created_at.desc())
                .limit(1)
            )
            if existing is not None:
                await _charge_lost_attempt(session, existing, request)
                return _state(existing)
            await session.execute(
                update(ConversationGoal)
                .where(
                    ConversationGoal.org_id == request.org_id,
                    ConversationGoal.conversation_id == request.conversation_id,
                    ConversationGoal.status == GoalStatus.ACTIVE.value,
                )
                .values(status=GoalStatus.STOPPED.value, end_reason="replaced by a new goal")
            )
            row = ConversationGoal(
                org_id=request.org_id,
                conversation_id=request.conversation_id,
                agent_id=request.agent_id,
                version_id=request.version_id,
                kind=kind,
                goal=goal[:4000],
                budget_micros=budget_micros,
                segment_budget_micros=min(SEGMENT_BUDGET_MICROS, budget_micros),
                spent_micros=0,
                segments=0,
                started_by_run_id=request.run_id,
            )
            session.add(row)
            await session.flush()
            return _state(row)

    async def stop_goals(self, subject: RunSubject) -> int:
        """``/goal stop``: stop the conversation's active goal; how many were stopped (0 or 1)."""
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            stopped = await session.scalars(
                update(ConversationGoal)
                .where(
                    ConversationGoal.org_id == request.org_id,
                    ConversationGoal.conversation_id == request.conversation_id,
                    ConversationGoal.status == GoalStatus.ACTIVE.value,
                )
                .values(status=GoalStatus.STOPPED.value, end_reason="stopped by /goal stop")
                .returning(ConversationGoal.id)
            )
            return len(stopped.all())

    async def active_goal(self, subject: RunSubject, goal_id: uuid.UUID) -> GoalState | None:
        """The goal a segment works on, while active; a recovered segment's lost attempt's spend is
        charged to it first (``_charge_lost_attempt``)."""
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            row = await session.scalar(
                select(ConversationGoal)
                .where(
                    ConversationGoal.org_id == request.org_id,
                    ConversationGoal.id == goal_id,
                    ConversationGoal.conversation_id == request.conversation_id,
                    ConversationGoal.status == GoalStatus.ACTIVE.value,
                )
                .with_for_update()
            )
            if row is None:
                return None
            await _charge_lost_attempt(session, row, request)
            return _state(row)

    async def goal_ended(self, subject: RunSubject, goal_id: uuid.UUID) -> bool:
        """Whether ``goal_id`` is a goal of this conversation that is no longer active (a
        ``pipelineStep`` wake may name another kind of pipeline: then False)."""
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            status = await session.scalar(
                select(ConversationGoal.status).where(
                    ConversationGoal.org_id == request.org_id,
                    ConversationGoal.id == goal_id,
                    ConversationGoal.conversation_id == request.conversation_id,
                )
            )
            return status is not None and status != GoalStatus.ACTIVE.value

    async def end_segment(self, subject: RunSubject, goal: GoalState, outcome: LoopOutcome, verdict: Verdict) -> bool:
        """Account the segment once and, when the goal continues, outbox the next segment's wake.
        False: this run's segment was already accounted (a redelivery)."""
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await session.execute(
                select(Conversation.id)
                .where(Conversation.org_id == request.org_id, Conversation.id == request.conversation_id)
                .with_for_update()
            )
            row = await session.scalar(select(ConversationGoal).where(ConversationGoal.id == goal.id).with_for_update())
            if row is None or row.last_run_id == request.run_id:
                return False
            row.spent_micros += outcome.cost_micros
            row.segments += 1
            row.last_run_id = request.run_id
            if row.status != GoalStatus.ACTIVE.value:
                # Stopped while this segment ran (/goal stop, the API, a new goal): what it spent still
                # counts, nothing follows it.
                return True
            row.status = verdict.status.value
            row.end_reason = None if verdict.continues else verdict.reason
            if verdict.continues:
                wake = DispatchRequested(
                    event_id=uuid.uuid5(SEGMENT_WAKE_NAMESPACE, f"{row.id}:{row.segments + 1}"),
                    org_id=request.org_id,
                    request_id=f"goal:{row.id}:{row.segments + 1}",
                    conversation_id=request.conversation_id,
                    contact_id=request.contact_id,
                    channel_session_id=request.channel_session_id,
                    wake_reason=WakeReason.PIPELINE_STEP,
                    wake_context=WakeContext(pipeline_run_id=row.id, run_id=request.run_id),
                    target_agent_id=row.agent_id,
                    target_version_id=row.version_id,
                )
                await session.run_sync(lambda s: enqueue_record(s, Topics.DISPATCH_REQUESTED, wake, serde=self._serde))
            return True


async def _charge_lost_attempt(session: AsyncSession, row: ConversationGoal, request: RunRequested) -> None:
    """A recovery attempt (its parent's runner died, or handed it back at a rollout) first charges
    what the lost attempt spent to the goal: that attempt never reached ``end_segment``, and the
    recovery got a fresh segment budget — a goal of $1 could spend $1.90, again at every handback.
    Once per lost attempt (``last_run_id`` names it then; a redelivered recovery finds it there);
    each recovery charges its own parent, so a chain of recoveries charges every attempt once."""
    parent = request.parent_run_id
    if request.wake_reason is not WakeReason.RECOVERY or parent is None or row.last_run_id == parent:
        return
    spent = await session.scalar(
        select(AiAgentRun.cost_micros).where(AiAgentRun.org_id == request.org_id, AiAgentRun.id == parent)
    )
    if not spent:
        return
    row.spent_micros += int(spent)
    row.last_run_id = parent
    await session.flush()


async def _ancestors(session: AsyncSession, request: RunRequested) -> list[uuid.UUID]:
    """The earlier attempts of a recovered run, newest first (each row names its parent)."""
    found: list[uuid.UUID] = []
    parent = request.parent_run_id
    while parent is not None and parent not in found and len(found) < max(1, request.attempt):
        found.append(parent)
        parent = await session.scalar(
            select(AiAgentRun.parent_run_id).where(AiAgentRun.org_id == request.org_id, AiAgentRun.id == parent)
        )
    return found
