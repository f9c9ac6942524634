"""Autonomy rules: settings per area, kill switches, deciding on proposed actions.

Sync functions over the request's org-scoped session; they never commit. Approval
is two steps around the tool call (``services.api.autonomy.executor``), all in the
request's transaction: :func:`claim_decision` moves the row ``proposed → approved``
with a conditional UPDATE (the row lock makes a concurrent second approval wait,
then find it decided: 409), the tool runs, :func:`record_execution` stores the
result, resumes a parked run and suggests promotion after the third approval.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.api.autonomy.schemas import ActionAutonomy, ActionView, AreaAutonomy, AutonomyView
from services.api.core.errors import Conflict, NotFound, ValidationFailed
from switchboard.areas import areas, is_area
from switchboard.autonomy import PROMOTE_AFTER_APPROVALS, load_settings, promotion_due, promotion_key
from switchboard.contracts import DispatchRequested, Serde, SuggestedAction, Topics, WakeContext
from switchboard.contracts.enums import InsightKind, InsightStatus, WakeReason
from switchboard.db.audit import record_audit
from switchboard.db.daily_brief import org_today
from switchboard.db.enums import AWAITING_APPROVAL, AutonomyMode, ConversationStatus, DecisionStatus
from switchboard.db.insights import status_record, upsert_insight
from switchboard.db.models import AiAgentRun, Conversation, Organization
from switchboard.db.models.autonomy import AgentDecision, WorkspaceActionAutonomy, WorkspaceAutonomy, WorkspaceInsight
from switchboard.db.outbox import enqueue_record
from switchboard.observability.logging import get_logger
from switchboard.tool_catalog import gated_write_tools

log = get_logger(__name__)


class AlreadyDecided(Conflict):
    """A second decision on the same action (it is executed at most once)."""

    code = "action_already_decided"


def view(session: Session, org_id: uuid.UUID) -> AutonomyView:
    settings = load_settings(session, org_id)
    return AutonomyView(
        actions=[
            ActionAutonomy(
                action_type=action_type,
                area=area,
                mode=settings.action_modes.get(action_type),
                effective_mode=settings.action_mode(area, action_type),
            )
            for action_type, area in gated_write_tools().items()
        ],
        kill_switch=settings.org_kill_switch,
        areas=[
            AreaAutonomy(
                area=a.slug,
                label=a.label,
                mode=settings.modes.get(a.slug, AutonomyMode.PROPOSE),
                kill_switch=a.slug in settings.killed_areas,
                effective_mode=settings.mode(a.slug),
            )
            for a in areas()
        ],
    )


def _area(area: str) -> str:
    if not is_area(area):
        raise NotFound("no such area")
    return area


def set_mode(
    session: Session, org_id: uuid.UUID, area: str, mode: AutonomyMode, user_id: uuid.UUID | None, request_id: str
) -> AutonomyView:
    _area(area)
    session.execute(
        insert(WorkspaceAutonomy)
        .values(org_id=org_id, area=area, mode=mode.value, updated_by=user_id)
        .on_conflict_do_update(
            index_elements=[WorkspaceAutonomy.org_id, WorkspaceAutonomy.area],
            set_={"mode": mode.value, "updated_by": user_id, "updated_at": func.now()},
        )
    )
    record_audit(
        session,
        org_id=org_id,
        action="autonomy.mode_set",
        actor_user_id=user_id,
        target_type="autonomy_area",
        target_id=area,
        details={"mode": mode.value},
        request_id=request_id,
    )
    return view(session, org_id)


def _action_area(action_type: str, area: str | None = None) -> str:
    """The area of a gated action type (404 for anything else, or when ``area`` is not its area)."""
    found = gated_write_tools().get(action_type)
    if found is None or (area is not None and found != area):
        raise NotFound("no such action type" if area is None else f"no such action type in the {area} area")
    return found


def set_action_mode(
    session: Session,
    org_id: uuid.UUID,
    action_type: str,
    mode: AutonomyMode | None,
    user_id: uuid.UUID | None,
    request_id: str,
) -> AutonomyView:
    """Give one action type its own mode (propose or auto), or None: it follows its area again."""
    area = _action_area(action_type)
    if mode is None:
        session.execute(
            delete(WorkspaceActionAutonomy).where(
                WorkspaceActionAutonomy.org_id == org_id, WorkspaceActionAutonomy.action_type == action_type
            )
        )
    else:
        if mode is AutonomyMode.OFF:
            raise ValidationFailed(
                "an action type is propose or auto; turn its area off instead", details={"field": "mode"}
            )
        session.execute(
            insert(WorkspaceActionAutonomy)
            .values(org_id=org_id, action_type=action_type, mode=mode.value, updated_by=user_id)
            .on_conflict_do_update(
                index_elements=[WorkspaceActionAutonomy.org_id, WorkspaceActionAutonomy.action_type],
                set_={"mode": mode.value, "updated_by": user_id, "updated_at": func.now()},
            )
        )
    record_audit(
        session,
        org_id=org_id,
        action="autonomy.action_mode_set",
        actor_user_id=user_id,
        target_type="autonomy_action",
        target_id=action_type,
        details={"area": area, "mode": mode.value if mode is not None else None},
        request_id=request_id,
    )
    return view(session, org_id)


def set_kill_switch(
    session: Session, org_id: uuid.UUID, area: str | None, engaged: bool, user_id: uuid.UUID | None, request_id: str
) -> AutonomyView:
    if area is None:
        session.execute(
            update(Organization)
            .where(Organization.id == org_id)
            .values(
                autonomy_kill_switch=engaged,
                autonomy_kill_switch_changed_at=datetime.now(UTC),
                autonomy_kill_switch_changed_by=user_id,
            )
        )
    else:
        if not is_area(area):
            raise ValidationFailed("unknown area", details={"field": "area"})
        session.execute(
            insert(WorkspaceAutonomy)
            .values(org_id=org_id, area=area, kill_switch=engaged, updated_by=user_id)
            .on_conflict_do_update(
                index_elements=[WorkspaceAutonomy.org_id, WorkspaceAutonomy.area],
                set_={"kill_switch": engaged, "updated_by": user_id, "updated_at": func.now()},
            )
        )
    record_audit(
        session,
        org_id=org_id,
        action="autonomy.kill_switch_set" if engaged else "autonomy.kill_switch_cleared",
        actor_user_id=user_id,
        target_type="autonomy_area" if area else "organization",
        target_id=area or org_id,
        request_id=request_id,
    )
    return view(session, org_id)


def list_actions(
    session: Session,
    org_id: uuid.UUID,
    status: DecisionStatus | None,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
) -> list[AgentDecision]:
    query = select(AgentDecision).where(AgentDecision.org_id == org_id)
    if status is not None:
        query = query.where(AgentDecision.status == status.value)
    if before is not None:
        query = query.where(
            (AgentDecision.created_at < before[0])
            | ((AgentDecision.created_at == before[0]) & (AgentDecision.id < before[1]))
        )
    return list(session.scalars(query.order_by(AgentDecision.created_at.desc(), AgentDecision.id.desc()).limit(limit)))


@dataclass(frozen=True)
class Claimed:
    """A decision this request moved out of ``proposed`` (nobody else can)."""

    id: uuid.UUID
    run_id: uuid.UUID | None
    area: str
    action_type: str
    proposed_action: dict[str, Any]
    # When the agent proposed it: a follow-up "in 16 hours" counts from then, not from the approval.
    proposed_at: datetime


def claim_decision(
    session: Session,
    org_id: uuid.UUID,
    decision_id: uuid.UUID,
    status: DecisionStatus,
    user_id: uuid.UUID | None,
    reason: str | None,
) -> Claimed:
    """``proposed → approved / rejected`` if still proposed; the row stays locked until commit."""
    row = session.execute(
        update(AgentDecision)
        .where(
            AgentDecision.org_id == org_id,
            AgentDecision.id == decision_id,
            AgentDecision.status == DecisionStatus.PROPOSED.value,
        )
        .values(status=status.value, decided_by=user_id, decided_at=func.now(), rationale=reason)
        .returning(
            AgentDecision.id,
            AgentDecision.run_id,
            AgentDecision.area,
            AgentDecision.action_type,
            AgentDecision.proposed_action,
            AgentDecision.created_at,
        )
    ).one_or_none()
    if row is None:
        exists = session.scalar(
            select(AgentDecision.status).where(AgentDecision.org_id == org_id, AgentDecision.id == decision_id)
        )
        if exists is None:
            raise NotFound("no such proposed action")
        raise AlreadyDecided(f"this action was already {exists}")
    return Claimed(row.id, row.run_id, row.area, row.action_type, dict(row.proposed_action), row.created_at)


def record_execution(session: Session, org_id: uuid.UUID, claimed: Claimed, result: dict[str, Any], ok: bool) -> None:
    values: dict[str, Any] = {"execution_result": {"result": result} if ok else {"error": result}}
    if ok:
        values |= {"status": DecisionStatus.EXECUTED.value, "executed_at": func.now()}
    session.execute(
        update(AgentDecision).where(AgentDecision.org_id == org_id, AgentDecision.id == claimed.id).values(**values)
    )


def close_decision(
    session: Session,
    serde: Serde,
    org_id: uuid.UUID,
    claimed: Claimed,
    *,
    approved: bool,
    user_id: uuid.UUID | None,
    request_id: str,
) -> ActionView:
    """The decision's aftermath, in the same transaction: Home item closed (``actioned`` when
    approved, ``dismissed`` when rejected, so the insights API tells them apart), audit, resume,
    promotion."""
    status = InsightStatus.ACTIONED if approved else InsightStatus.DISMISSED
    closed = session.scalars(
        update(WorkspaceInsight)
        .where(WorkspaceInsight.org_id == org_id, WorkspaceInsight.agent_decision_id == claimed.id)
        .values(status=status.value, status_changed_at=func.now(), status_changed_by=user_id)
        .returning(WorkspaceInsight)
    ).all()
    for insight in closed:
        _announce_closed(session, serde, insight, status, claimed, request_id)
    record_audit(
        session,
        org_id=org_id,
        action="autonomy.action_approved" if approved else "autonomy.action_rejected",
        actor_user_id=user_id,
        target_type="agent_decision",
        target_id=claimed.id,
        details={"action_type": claimed.action_type, "area": claimed.area},
        request_id=request_id,
    )
    if claimed.proposed_action.get("pause") and claimed.run_id is not None:
        _resume(session, serde, org_id, claimed, user_id, request_id)
    if approved:
        _suggest_promotion(session, org_id, claimed)
    row = session.scalar(select(AgentDecision).where(AgentDecision.org_id == org_id, AgentDecision.id == claimed.id))
    return ActionView.model_validate(row)


def _announce_closed(
    session: Session,
    serde: Serde,
    insight: WorkspaceInsight,
    status: InsightStatus,
    claimed: Claimed,
    request_id: str,
) -> None:
    """The Home item's new status on ``insights``: the brief drops the card from the to-do list and
    the notifier delivers what an approved send queued (at most once) — nobody polls for either."""
    action = claimed.proposed_action

    def _uuid(key: str) -> uuid.UUID | None:
        value = action.get(key)
        return uuid.UUID(str(value)) if value else None

    record = status_record(
        insight,
        status.value,
        request_id,
        agent_id=_uuid("agent_id"),
        conversation_id=_uuid("conversation_id"),
    )
    enqueue_record(session, Topics.INSIGHTS, record, serde=serde)


def _resume(
    session: Session, serde: Serde, org_id: uuid.UUID, claimed: Claimed, user_id: uuid.UUID | None, request_id: str
) -> None:
    """Wake the paused run's agent with the decision: a targeted ``dispatch_requested`` whose
    ``wake_context.run_id`` names the parked run (the runner finds the decision by it)."""
    assert claimed.run_id is not None
    session.execute(
        update(AiAgentRun)
        .where(AiAgentRun.org_id == org_id, AiAgentRun.id == claimed.run_id, AiAgentRun.status == AWAITING_APPROVAL)
        .values(status="aborted")
    )
    action = claimed.proposed_action
    conversation_id = uuid.UUID(action["conversation_id"])
    # Outbox writers lock the conversation first, so outbox ids follow commit order per conversation.
    status = session.scalar(
        select(Conversation.status)
        .where(Conversation.org_id == org_id, Conversation.id == conversation_id)
        .with_for_update()
    )
    if status != ConversationStatus.OPEN.value:
        # People took the conversation over (handoff) while the run waited: the decision stands
        # (an approved action was executed above), but the agent does not come back into it.
        log.info(
            "parked run not resumed: the conversation is not open",
            extra={"run_id": str(claimed.run_id), "conversation_id": str(conversation_id), "status": status},
        )
        return
    record = DispatchRequested(
        org_id=org_id,
        request_id=request_id or None,
        conversation_id=conversation_id,
        contact_id=uuid.UUID(action["contact_id"]),
        channel_session_id=uuid.UUID(action["channel_session_id"]),
        wake_reason=WakeReason.ASSIGNMENT,
        wake_context=WakeContext(run_id=claimed.run_id, assigned_by_user_id=user_id),
        target_agent_id=uuid.UUID(action["agent_id"]),
        target_version_id=uuid.UUID(action["version_id"]),
    )
    enqueue_record(session, Topics.DISPATCH_REQUESTED, record, serde=serde)


def _promotion_row(session: Session, org_id: uuid.UUID, area: str, action_type: str, approvals: int) -> uuid.UUID:
    """The suggestion as a ``workspace_insights`` row (idempotent on its key; the owner's status is kept).

    No ``insights`` record: the brief derives the Home's promote card from ``agent_decisions``
    with the same threshold, so a record would show the suggestion twice."""
    return upsert_insight(
        session,
        org_id=org_id,
        dedupe_key=promotion_key(area, action_type),
        area=area,
        title=f"Let agents run {action_type} automatically?",
        body=(
            f"You approved {action_type} {approvals} times. Let agents do it without asking? "
            f"Only {action_type}: the rest of the {area} area keeps its mode."
        ),
        kind=InsightKind.INSIGHT,
        # The org's day, as every Home item is dated (the database's CURRENT_DATE is the server's:
        # west of UTC in the evening, tomorrow — the answered card then stayed on today's Home).
        insight_date=org_today(session, org_id),
        suggested_actions=[
            SuggestedAction(
                action_type="set_action_autonomy",
                label=f"Let agents run {action_type} on their own",
                arguments_json=json.dumps({"action_type": action_type, "mode": AutonomyMode.AUTO.value}),
            ).model_dump(mode="json")
        ],
    ).id


def _suggest_promotion(session: Session, org_id: uuid.UUID, claimed: Claimed) -> None:
    """After the owner approved this action type the third time while its area proposes: a
    suggestion to switch the area to ``auto`` — never the switch itself [000 §3]."""
    approvals = session.scalar(
        select(func.count())
        .select_from(AgentDecision)
        .where(
            AgentDecision.org_id == org_id,
            AgentDecision.action_type == claimed.action_type,
            AgentDecision.autonomy_tier == AutonomyMode.PROPOSE.value,
            AgentDecision.status.in_([DecisionStatus.APPROVED.value, DecisionStatus.EXECUTED.value]),
        )
    )
    settings = load_settings(session, org_id)
    if promotion_due(int(approvals or 0), settings.action_mode(claimed.area, claimed.action_type)):
        _promotion_row(session, org_id, claimed.area, claimed.action_type, int(approvals or 0))


def decide_promotion(
    session: Session,
    serde: Serde,
    org_id: uuid.UUID,
    area: str,
    action_type: str,
    accept: bool,
    user_id: uuid.UUID | None,
    request_id: str,
) -> AutonomyView:
    """Accept (that action type becomes ``auto``, not its whole area) or dismiss a promote
    suggestion; its row records the answer."""
    _area(area)
    if accept:
        _action_area(action_type, area)  # dismissing needs no catalog entry: it changes no mode
        set_action_mode(session, org_id, action_type, AutonomyMode.AUTO, user_id, request_id)
    row_id = _promotion_row(session, org_id, area, action_type, PROMOTE_AFTER_APPROVALS)
    status = (InsightStatus.ACTIONED if accept else InsightStatus.DISMISSED).value
    answered = session.scalars(
        update(WorkspaceInsight)
        .where(WorkspaceInsight.org_id == org_id, WorkspaceInsight.id == row_id)
        .values(status=status, status_changed_at=func.now(), status_changed_by=user_id)
        .returning(WorkspaceInsight)
    ).one()
    # The brief recomposes the Home on this record and leaves out an answered suggestion.
    enqueue_record(session, Topics.INSIGHTS, status_record(answered, status, request_id), serde=serde)
    record_audit(
        session,
        org_id=org_id,
        action="autonomy.promotion_accepted" if accept else "autonomy.promotion_dismissed",
        actor_user_id=user_id,
        target_type="autonomy_area",
        target_id=area,
        details={"action_type": action_type},
        request_id=request_id,
    )
    return view(session, org_id)
