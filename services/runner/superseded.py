"""A recovery attempt withdraws the proposals its lost parent left waiting for the owner.

A recovery attempt (``parent_run_id``, docs/dispatcher.md "Recovery") runs the turn again
under a new run id, and a proposal's id is derived from its run's (``uuid5(run_id, call)``).
Left alone, a runner killed after proposing a write left the owner two approval cards for
one request — and approving both sent the message twice. So the claim of the recovery
attempt, in its own transaction, turns the lost parent's still-``proposed`` decisions
``rejected`` (rationale :data:`RATIONALE`, nobody's decision) and dismisses their Home items,
announced on ``insights`` like an owner's rejection (the brief drops the card); the attempt
proposes again if it still should.

What the parent *did* stays: an executed action, a follow-up it scheduled, an approved
action's effects (they carry the parent's run id too, so they are not told apart from the
parent's own here — the reason follow-ups and queued messages are left alone). A decision
the owner is deciding at this moment is skipped (``SKIP LOCKED``): their decision wins, and
the claim never waits on (or deadlocks with) the approval's transaction. Only a parent closed
``processLost`` (by this claim, the sweep, or handed back at a stop) is touched: one that
completed or paused for approval keeps its proposals.
"""

from __future__ import annotations

import uuid
from typing import Final

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from switchboard.contracts import RunRequested, Serde, Topics
from switchboard.contracts.enums import ErrorFamily, InsightStatus
from switchboard.db.enums import DecisionStatus
from switchboard.db.insights import status_record
from switchboard.db.models import AgentDecision, AiAgentRun
from switchboard.db.models.autonomy import WorkspaceInsight
from switchboard.db.outbox import enqueue_record
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

RATIONALE: Final = "withdrawn: the run was lost before it finished; its recovery attempt took over"


async def withdraw_lost_attempt(session: AsyncSession, serde: Serde, request: RunRequested) -> int:
    """Withdraw the proposals the lost parent of ``request`` left waiting (none for a first
    attempt); how many."""
    parent_id = request.parent_run_id
    if parent_id is None:
        return 0
    org_id = request.org_id
    lost = await session.scalar(
        select(AiAgentRun.id).where(
            AiAgentRun.org_id == org_id,
            AiAgentRun.id == parent_id,
            AiAgentRun.error_family == ErrorFamily.PROCESS_LOST.value,
        )
    )
    if lost is None:
        return 0
    decisions = (
        await session.scalars(
            update(AgentDecision)
            .where(
                AgentDecision.org_id == org_id,
                AgentDecision.id.in_(
                    select(AgentDecision.id)
                    .where(
                        AgentDecision.org_id == org_id,
                        AgentDecision.run_id == parent_id,
                        AgentDecision.status == DecisionStatus.PROPOSED.value,
                    )
                    .with_for_update(skip_locked=True)
                ),
            )
            .values(status=DecisionStatus.REJECTED.value, rationale=RATIONALE, decided_at=func.now())
            .returning(AgentDecision.id)
        )
    ).all()
    if decisions:
        await session.run_sync(lambda s: _dismiss_home_items(s, serde, request, list(decisions)))
        log.info(
            "the lost attempt's proposals were withdrawn",
            extra={"run_id": str(request.run_id), "parent_run_id": str(parent_id), "decisions": len(decisions)},
        )
    return len(decisions)


def _dismiss_home_items(session: Session, serde: Serde, request: RunRequested, decision_ids: list[uuid.UUID]) -> None:
    """The withdrawn proposals' Home items: ``dismissed``, and said on ``insights`` (the brief drops
    the cards), as an owner's rejection is (services/api/autonomy/service.py)."""
    items = session.scalars(
        update(WorkspaceInsight)
        .where(
            WorkspaceInsight.org_id == request.org_id,
            WorkspaceInsight.agent_decision_id.in_(decision_ids),
            WorkspaceInsight.status.in_([InsightStatus.NEW.value, InsightStatus.SEEN.value]),
        )
        .values(status=InsightStatus.DISMISSED.value, status_changed_at=func.now())
        .returning(WorkspaceInsight)
    ).all()
    for item in items:
        record = status_record(
            item,
            InsightStatus.DISMISSED.value,
            request.request_id,
            agent_id=request.agent_id,
            conversation_id=request.conversation_id,
        )
        enqueue_record(session, Topics.INSIGHTS, record, serde=serde)
