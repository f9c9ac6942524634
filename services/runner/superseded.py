"""What a lost attempt left undone is withdrawn when its recovery attempt takes the run.

A recovery attempt (``parent_run_id``, docs/dispatcher.md "Recovery") runs the turn again
under a new run id, and every effect a run leaves is keyed by its run id: the proposals on
the Home (``uuid5(run_id, call)``), the follow-ups it scheduled, the messages its send tool
queued. Left alone, a runner killed after a write-tool call gave the owner two approval
cards for one request (approving both sent twice), two follow-ups, and a queued message
that stayed ``pending`` forever (only the run's completion sends them, and a lost run never
completes). So the claim of the recovery attempt, in its own transaction, withdraws what
the lost attempt left *undone*:

- its ``proposed`` decisions become ``rejected`` (rationale :data:`RATIONALE`, nobody's
  decision) and their Home items ``dismissed``, announced on ``insights`` like an owner's
  rejection (the brief drops the card);
- its ``scheduled`` follow-ups are ``cancelled``;
- its queued outbound messages that no send claimed are ``failed`` (:data:`WITHDRAWN`).

What it *did* stays (an executed action, a message already claimed by the notifier). Only a
parent that was lost — closed ``processLost`` (by this claim, the sweep, or handed back at a
stop) — is touched: one that completed or paused for approval keeps everything, and then
the attempt does not answer again anyway (``RunStore._answered_by``).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import Final

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from switchboard.contracts import RunRequested, Serde, Topics
from switchboard.contracts.enums import ErrorFamily, InsightStatus
from switchboard.db.enums import DecisionStatus, FollowupStatus
from switchboard.db.insights import status_record
from switchboard.db.models import AgentDecision, AiAgentRun, ScheduledFollowup
from switchboard.db.models.autonomy import WorkspaceInsight
from switchboard.db.outbox import enqueue_record
from switchboard.db.queued_messages import cancel_queued_messages
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

RATIONALE: Final = "withdrawn: the run was lost before it finished; its recovery attempt took over"
WITHDRAWN: Final = "withdrawn_run_lost"


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """What the claim withdrew (logged)."""

    decisions: int = 0
    followups: int = 0
    messages: int = 0

    @property
    def any(self) -> bool:
        return bool(self.decisions or self.followups or self.messages)


async def withdraw_lost_attempt(session: AsyncSession, serde: Serde, request: RunRequested) -> Withdrawn:
    """Withdraw what the lost parent of ``request`` left undone (nothing for a first attempt)."""
    parent_id = request.parent_run_id
    if parent_id is None:
        return Withdrawn()
    org_id = request.org_id
    lost = await session.scalar(
        select(AiAgentRun.id).where(
            AiAgentRun.org_id == org_id,
            AiAgentRun.id == parent_id,
            AiAgentRun.error_family == ErrorFamily.PROCESS_LOST.value,
        )
    )
    if lost is None:
        return Withdrawn()
    decisions = (
        await session.scalars(
            update(AgentDecision)
            .where(
                AgentDecision.org_id == org_id,
                AgentDecision.run_id == parent_id,
                AgentDecision.status == DecisionStatus.PROPOSED.value,
            )
            .values(status=DecisionStatus.REJECTED.value, rationale=RATIONALE, decided_at=func.now())
            .returning(AgentDecision.id)
        )
    ).all()
    if decisions:
        await session.run_sync(lambda s: _dismiss_home_items(s, serde, request, list(decisions)))
    followups = await session.execute(
        update(ScheduledFollowup)
        .where(
            ScheduledFollowup.org_id == org_id,
            ScheduledFollowup.created_by_run_id == parent_id,
            ScheduledFollowup.status == FollowupStatus.SCHEDULED.value,
        )
        .values(status=FollowupStatus.CANCELLED.value, cancelled_at=func.now(), error=WITHDRAWN)
    )
    messages = await cancel_queued_messages(session, org_id, parent_id, WITHDRAWN)
    withdrawn = Withdrawn(
        decisions=len(decisions),
        followups=int(getattr(followups, "rowcount", 0) or 0),
        messages=messages,
    )
    if withdrawn.any:
        log.info(
            "what the lost attempt left undone was withdrawn",
            extra={"run_id": str(request.run_id), "parent_run_id": str(parent_id), **asdict(withdrawn)},
        )
    return withdrawn


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
