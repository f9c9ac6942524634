"""A recovery attempt withdraws what its lost parent left unfinished.

A recovery attempt (``parent_run_id``, docs/dispatcher.md "Recovery") runs the turn again
from the start under a new run id, and the model acts again: left alone, what the killed
parent had begun doubled. So the claim of the recovery attempt, in its own transaction,
withdraws the lost parent's unfinished work:

- its still-``proposed`` decisions become ``rejected`` (rationale :data:`RATIONALE`, nobody's
  decision) and their Home items ``dismissed``, announced on ``insights`` like an owner's
  rejection (the brief drops the card) — two cards for one request, approved both, sent twice;
- the messages its send tool queued (``pending``, never claimed: a run's messages go out with
  its completion, which a lost run never has) become ``failed`` with :data:`WITHDRAWN`, and
  every model's view of the conversation leaves them out from then on (the claim reloads the
  attempt's history; summaries and the history tool filter them), so no model takes them for
  said — they stayed ``pending`` forever and the attempt sent its own;
- the follow-ups it scheduled become ``cancelled`` (error :data:`WITHDRAWN`) — the attempt
  scheduled the same promise again and the customer was called back twice.

The attempt proposes, sends and schedules again if it still should. What the parent *did*
stays: an executed action, and whatever an owner approved (its effects carry the parent's run
id too, so they say so: ``messages.attributes.approved``, ``scheduled_followups.approved``). A
row someone else holds at this moment — the owner deciding a proposal, the scheduler firing a
follow-up — is skipped (``SKIP LOCKED``): theirs wins, and the claim never waits on (or
deadlocks with) their transaction. Only a parent closed ``processLost`` (by this claim, the
sweep, or handed back at a stop) is touched: one that completed or paused for approval keeps
everything.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from switchboard.contracts import RunRequested, Serde, Topics
from switchboard.contracts.enums import ErrorFamily, InsightStatus
from switchboard.db.enums import DecisionStatus, FollowupStatus, MessageDeliveryStatus
from switchboard.db.insights import status_record
from switchboard.db.models import AgentDecision, AiAgentRun, Message, ScheduledFollowup
from switchboard.db.models.autonomy import WorkspaceInsight
from switchboard.db.outbox import enqueue_record
from switchboard.db.queued_messages import queued
from switchboard.observability.logging import get_logger
from switchboard.run_outcomes import WITHDRAWN_RUN_LOST

log = get_logger(__name__)

RATIONALE: Final = "withdrawn: the run was lost before it finished; its recovery attempt took over"
# ``delivery_error`` of a withdrawn message and ``error`` of a withdrawn follow-up.
WITHDRAWN: Final = WITHDRAWN_RUN_LOST


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """What a recovery claim withdrew from its lost parent."""

    proposals: int = 0
    followups: int = 0
    # The queued messages, by id: the claim reloads the attempt's history without them.
    message_ids: frozenset[uuid.UUID] = frozenset()


async def withdraw_lost_attempt(session: AsyncSession, serde: Serde, request: RunRequested) -> Withdrawn:
    """Withdraw what the lost parent of ``request`` left unfinished (nothing for a first attempt)."""
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
    decisions = await _update_unheld(
        session,
        AgentDecision,
        org_id,
        [AgentDecision.run_id == parent_id, AgentDecision.status == DecisionStatus.PROPOSED.value],
        {"status": DecisionStatus.REJECTED.value, "rationale": RATIONALE, "decided_at": func.now()},
    )
    if decisions:
        await session.run_sync(lambda s: _dismiss_home_items(s, serde, request, decisions))
    # Queued by its send tool and never claimed (an approved one may be claimed any moment: kept).
    messages = await _update_unheld(
        session,
        Message,
        org_id,
        queued(org_id, parent_id, keep_approved=True),
        {"delivery_status": MessageDeliveryStatus.FAILED.value, "delivery_error": WITHDRAWN},
    )
    followups = await _update_unheld(
        session,
        ScheduledFollowup,
        org_id,
        [
            ScheduledFollowup.created_by_run_id == parent_id,
            ScheduledFollowup.status == FollowupStatus.SCHEDULED.value,
            ScheduledFollowup.approved.is_(False),
        ],
        {"status": FollowupStatus.CANCELLED.value, "cancelled_at": func.now(), "error": WITHDRAWN},
    )
    withdrawn = Withdrawn(proposals=len(decisions), followups=len(followups), message_ids=frozenset(messages))
    if decisions or messages or followups:
        log.info(
            "the lost attempt's unfinished work was withdrawn",
            extra={
                "run_id": str(request.run_id),
                "parent_run_id": str(parent_id),
                "decisions": len(decisions),
                "followups": len(followups),
                "messages": len(messages),
            },
        )
    return withdrawn


async def _update_unheld(
    session: AsyncSession,
    model: type[AgentDecision] | type[Message] | type[ScheduledFollowup],
    org_id: uuid.UUID,
    conditions: list[ColumnElement[bool]],
    values: dict[str, Any],
) -> list[uuid.UUID]:
    """Update the org's rows matching ``conditions`` that no other transaction holds right now
    (``SKIP LOCKED``: the owner deciding, the scheduler firing); their ids."""
    unheld = select(model.id).where(model.org_id == org_id, *conditions).with_for_update(skip_locked=True)
    updated = await session.scalars(
        update(model).where(model.org_id == org_id, model.id.in_(unheld)).values(**values).returning(model.id)
    )
    return list(updated.all())


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
