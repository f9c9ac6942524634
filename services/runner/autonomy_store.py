"""Every SQL statement of the runner's autonomy gate (docs/autonomy.md).

Each method is one short tenant transaction. A proposal writes its
``agent_decisions`` row, its ``workspace_insights`` row and the ``insights``
record (outbox) atomically; the decision id is derived from the run and the
tool call, so a redelivered run writes nothing twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import exists, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.runner.preload import MISSING
from services.runner.subject import RunSubject
from switchboard.autonomy import AutonomySettings, InsightNote, load_settings, proposal_key, publish_insight
from switchboard.contracts import Action, RunRequested, Serde, WakeReason
from switchboard.contracts.enums import InsightKind
from switchboard.db.daily_brief import org_today
from switchboard.db.enums import AWAITING_APPROVAL, AutonomyMode, DecisionStatus
from switchboard.db.models import AiAgentRun, AiAgentVersion
from switchboard.db.models.autonomy import AgentDecision
from switchboard.db.session import async_tenant_transaction
from switchboard.tool_catalog import gated_area

AUTONOMY_KEY: Final = "autonomy"


@dataclass(frozen=True, slots=True)
class ResumeDecision:
    """The owner's decision on the write that parked a run, as the resumed run needs it."""

    decision_id: uuid.UUID
    status: DecisionStatus
    proposed_action: dict[str, Any]
    execution_result: dict[str, Any] | None
    rationale: str | None


@dataclass(frozen=True, slots=True)
class AutonomyRead:
    """What a run's autonomy gate reads before the loop."""

    settings: AutonomySettings
    pause_on_proposal: bool
    resume: ResumeDecision | None


async def read_autonomy(session: AsyncSession, request: RunRequested) -> AutonomyRead:
    """The reads of :meth:`AutonomyStore.load`, in the caller's tenant transaction."""
    settings = await session.run_sync(lambda s: load_settings(s, request.org_id))
    pause = await session.scalar(
        select(AiAgentVersion.pause_on_proposal).where(
            AiAgentVersion.org_id == request.org_id, AiAgentVersion.id == request.version_id
        )
    )
    resume = None
    parked_run_id = await _parked_run(session, request)
    if parked_run_id is not None:
        row = await session.scalar(
            select(AgentDecision)
            .where(
                AgentDecision.org_id == request.org_id,
                AgentDecision.run_id == parked_run_id,
                AgentDecision.status != DecisionStatus.PROPOSED.value,
                AgentDecision.proposed_action["pause"].as_boolean().is_(True),
            )
            .order_by(AgentDecision.created_at)
            .limit(1)
        )
        if row is not None:
            resume = ResumeDecision(
                decision_id=row.id,
                status=DecisionStatus(row.status),
                proposed_action=dict(row.proposed_action),
                execution_result=row.execution_result,
                rationale=row.rationale,
            )
    return AutonomyRead(settings, bool(pause), resume)


def may_resume(request: RunRequested) -> bool:
    """Whether the run may resume a parked one: the owner's decision woke it (``assignment`` naming
    the parked run, services/api/autonomy/service.py), or it is the recovery of such a wake (which
    keeps who assigned it). Other wakes name a run for other reasons — a follow-up its creator, a
    ``childCompleted`` the child — and must not replay that run's decision (a follow-up firing days
    after an approval answered the stale approval instead of doing its follow-up)."""
    context = request.wake_context
    if context.run_id is None:
        return False
    if request.wake_reason is WakeReason.ASSIGNMENT:
        return True
    return request.wake_reason is WakeReason.RECOVERY and context.assigned_by_user_id is not None


async def _parked_run(session: AsyncSession, request: RunRequested) -> uuid.UUID | None:
    """The parked run this run resumes, if any. A recovery's context names the lost attempt, not
    the parked run: the lost attempts' rows say what they resumed (each recovery names the one
    before it), read back until the assignment that woke the first one."""
    if not may_resume(request):
        return None
    run_id = request.wake_context.run_id
    if request.wake_reason is WakeReason.ASSIGNMENT:
        return run_id
    for _ in range(max(1, request.attempt)):  # one row per earlier attempt at most
        row = (
            await session.execute(
                select(AiAgentRun.wake_reason, AiAgentRun.wake_context["run_id"].astext).where(
                    AiAgentRun.org_id == request.org_id, AiAgentRun.id == run_id
                )
            )
        ).one_or_none()
        if row is None or row[1] is None:
            return None  # lost before any runner recorded what it woke for: nothing to resume from
        named = uuid.UUID(row[1])
        if row.wake_reason == WakeReason.ASSIGNMENT.value:
            return named
        if row.wake_reason != WakeReason.RECOVERY.value:
            return None
        run_id = named
    return None


def needs_autonomy(subject: RunSubject, granted: tuple[str, ...]) -> bool:
    """The gate reads its settings only when they matter: a gated write tool is granted, or the run
    resumes a parked one."""
    return any(gated_area(t) for t in granted) or may_resume(subject.request)


class AutonomyPreload:
    """The gate's reads with the run's subject (services/runner/preload.py), for the tools the version
    grants (a turn may offer fewer: then the read is simply not used). A run resuming a parked one also
    needs the owner's decision: the gate reads that itself."""

    key = AUTONOMY_KEY
    sql = """
    SELECT json_build_object(
        'kill', (SELECT o.autonomy_kill_switch FROM organizations AS o WHERE o.id = :org_id),
        'areas', (SELECT coalesce(json_agg(json_build_array(w.area, w.mode, w.kill_switch)), '[]')
                  FROM workspace_autonomy AS w WHERE w.org_id = :org_id),
        'actions', (SELECT coalesce(json_agg(json_build_array(a.action_type, a.mode)), '[]')
                    FROM workspace_action_autonomy AS a WHERE a.org_id = :org_id),
        'pause', v.pause_on_proposal)
    """

    def params(self, request: RunRequested) -> Mapping[str, Any]:
        return {}

    def parse(self, value: Any, subject: RunSubject) -> object:
        if may_resume(subject.request) or not needs_autonomy(subject, subject.version.granted_tools()):
            return MISSING
        areas = value.get("areas") or ()
        settings = AutonomySettings(
            org_kill_switch=bool(value.get("kill")),
            modes={area: AutonomyMode(mode) for area, mode, _ in areas},
            killed_areas=frozenset(area for area, _, killed in areas if killed),
            action_modes={action_type: AutonomyMode(mode) for action_type, mode in value.get("actions") or ()},
        )
        return AutonomyRead(settings, bool(value.get("pause")), None)


class AutonomyStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], serde: Serde) -> None:
        self._sessions = sessions
        self._serde = serde

    async def load(self, request: RunRequested) -> AutonomyRead:
        """The org's settings, the version's pause flag, and the decision this run resumes after (if any)."""
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            return await read_autonomy(session, request)

    async def current_settings(self, org_id: uuid.UUID) -> AutonomySettings:
        """The org's settings now: read again before each gated write, so a kill switch engaged
        while a run (or a /goal segment) is under way stops its next write, not its next run."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            return await session.run_sync(lambda s: load_settings(s, org_id))

    async def propose(self, request: RunRequested, action: Action, proposed: dict[str, Any], title: str) -> None:
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            if not await _insert_decision(session, request, action, proposed, AutonomyMode.PROPOSE):
                return  # a redelivered run: recorded already
            # The org's own day, as every Home fact: a UTC date put an evening proposal of a
            # São Paulo org on tomorrow's Home, and its approval left today's card in place.
            day = await session.run_sync(lambda s: org_today(s, request.org_id))
            note = InsightNote(
                org_id=request.org_id,
                key=proposal_key(action.action_id),
                kind=InsightKind.PROPOSED_ACTION,
                area=action.area,
                title=title,
                body=action.summary,
                day=day,
                decision_id=action.action_id,
                proposed_action=action,
                run_id=request.run_id,
                agent_id=request.agent_id,
                conversation_id=request.conversation_id,
                request_id=request.request_id,
            )
            await session.run_sync(lambda s: publish_insight(s, self._serde, note))

    async def executed(
        self, request: RunRequested, action: Action, proposed: dict[str, Any], result: dict[str, Any]
    ) -> None:
        """An ``auto`` action that ran: recorded with its result and how to undo it."""
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await _insert_decision(session, request, action, proposed, AutonomyMode.AUTO, result=result)

    async def park(self, request: RunRequested, abort_reason: str) -> bool:
        """Mark the closed run ``awaiting_approval`` while its proposal is still undecided."""
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            undecided = exists().where(
                AgentDecision.org_id == request.org_id,
                AgentDecision.run_id == request.run_id,
                AgentDecision.status == DecisionStatus.PROPOSED.value,
            )
            parked = await session.scalar(
                update(AiAgentRun)
                .where(
                    AiAgentRun.org_id == request.org_id,
                    AiAgentRun.id == request.run_id,
                    AiAgentRun.abort_reason == abort_reason,
                    undecided,
                )
                .values(status=AWAITING_APPROVAL)
                .returning(AiAgentRun.id)
            )
        return parked is not None


async def _insert_decision(
    session: AsyncSession,
    request: RunRequested,
    action: Action,
    proposed: dict[str, Any],
    tier: AutonomyMode,
    *,
    result: dict[str, Any] | None = None,
) -> bool:
    """The ``agent_decisions`` row of an action (id = action id); False if it exists already."""
    executed = tier is AutonomyMode.AUTO
    inserted = await session.scalar(
        insert(AgentDecision)
        .values(
            id=action.action_id,
            org_id=request.org_id,
            run_id=request.run_id,
            agent_id=request.agent_id,
            area=action.area,
            action_type=action.action_type,
            proposed_action=proposed,
            autonomy_tier=tier.value,
            status=(DecisionStatus.EXECUTED if executed else DecisionStatus.PROPOSED).value,
            executed_at=(action.executed_at or datetime.now(UTC)) if executed else None,
            execution_result=result,
        )
        .on_conflict_do_nothing()
        .returning(AgentDecision.id)
    )
    return inserted is not None
