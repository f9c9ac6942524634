"""Listing insights and the owner's steps on them — seen, dismissed, actioned (docs/analysis.md).
Sync functions over a Session."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, tuple_
from sqlalchemy.orm import Session

from services.api.analysis.schemas import InsightView
from services.api.core.errors import Conflict, NotFound, ValidationFailed
from switchboard.areas import is_area
from switchboard.autonomy import PROMOTION_KEY_PREFIX
from switchboard.contracts import Serde, Topics
from switchboard.db.audit import record_audit
from switchboard.db.enums import InsightStatus
from switchboard.db.insights import status_record
from switchboard.db.models import WorkspaceInsight
from switchboard.db.outbox import enqueue_record


class UnknownInsightFilter(ValidationFailed):
    code = "insight_filter_invalid"
    default_message = "status must be new, seen, dismissed or actioned; area must be a known area"


def view(row: WorkspaceInsight) -> InsightView:
    return InsightView.model_validate(
        {**{c: getattr(row, c) for c in InsightView.model_fields if c != "insight_key"}, "insight_key": row.dedupe_key}
    )


def list_insights(
    session: Session,
    org_id: uuid.UUID,
    *,
    status: str | None,
    area: str | None,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
) -> list[WorkspaceInsight]:
    """Newest first (created_at desc, id desc), optionally one status and one area."""
    if (status is not None and status not in {s.value for s in InsightStatus}) or (
        area is not None and not is_area(area)
    ):
        raise UnknownInsightFilter()
    query = select(WorkspaceInsight).where(WorkspaceInsight.org_id == org_id)
    if status is not None:
        query = query.where(WorkspaceInsight.status == status)
    if area is not None:
        query = query.where(WorkspaceInsight.area == area)
    if before is not None:
        query = query.where(
            or_(
                WorkspaceInsight.created_at < before[0],
                tuple_(WorkspaceInsight.created_at, WorkspaceInsight.id) < tuple_(*before),
            )
        )
    query = query.order_by(WorkspaceInsight.created_at.desc(), WorkspaceInsight.id.desc()).limit(limit)
    return list(session.scalars(query).all())


class InsightAlreadyActioned(Conflict):
    code = "insight_already_actioned"
    default_message = "The owner already acted on this insight"


class InsightDecidedByApproval(Conflict):
    code = "insight_decided_by_approval"
    default_message = "This insight is a proposed action: approve or reject its decision instead"


class InsightDecidedByPromotion(Conflict):
    code = "insight_decided_by_promotion"
    default_message = (
        "This insight is a promote suggestion: accept or dismiss it under /api/v1/autonomy/{area}/promotions"
    )


class UnknownSuggestedAction(ValidationFailed):
    code = "insight_action_unknown"
    default_message = "action_type must be one of the insight's suggested actions"


# What each owner step may change (any other current status: nothing changes, idempotent).
_CHANGES_FROM: dict[InsightStatus, frozenset[str]] = {
    InsightStatus.SEEN: frozenset({InsightStatus.NEW.value}),
    InsightStatus.DISMISSED: frozenset({InsightStatus.NEW.value, InsightStatus.SEEN.value}),
    InsightStatus.ACTIONED: frozenset(
        {InsightStatus.NEW.value, InsightStatus.SEEN.value, InsightStatus.DISMISSED.value}
    ),
}
_AUDIT_ACTION: dict[InsightStatus, str] = {
    InsightStatus.SEEN: "insight.seen",
    InsightStatus.DISMISSED: "insight.dismissed",
    InsightStatus.ACTIONED: "insight.actioned",
}


def dismiss(
    session: Session, serde: Serde, org_id: uuid.UUID, insight_id: uuid.UUID, user_id: uuid.UUID | None, request_id: str
) -> InsightView:
    """Mark the insight dismissed (idempotent). A later analysis that finds the same thing refreshes
    the content but leaves it dismissed. An insight already acted on stays actioned (409)."""
    row = _locked(session, org_id, insight_id)
    if row.status == InsightStatus.ACTIONED.value:
        raise InsightAlreadyActioned()
    return _change(session, serde, row, InsightStatus.DISMISSED, user_id, request_id, {})


def mark_seen(
    session: Session, serde: Serde, org_id: uuid.UUID, insight_id: uuid.UUID, user_id: uuid.UUID | None, request_id: str
) -> InsightView:
    """The owner has read it: ``new`` becomes ``seen`` (it stays on the to-do list); any other status stays."""
    return _change(session, serde, _locked(session, org_id, insight_id), InsightStatus.SEEN, user_id, request_id, {})


def mark_actioned(
    session: Session,
    serde: Serde,
    org_id: uuid.UUID,
    insight_id: uuid.UUID,
    action_type: str | None,
    user_id: uuid.UUID | None,
    request_id: str,
) -> InsightView:
    """The owner acted on the insight (its Home card's "approve"): it leaves the to-do list for good.

    Which suggested action the owner took, if any, is recorded in the audit log. Switchboard does
    not execute an analysis' suggestions itself: an action an agent takes goes through autonomy
    (an ``agent_decisions`` row), and an insight backed by one is answered there (409 here).
    """
    row = _locked(session, org_id, insight_id)
    if row.agent_decision_id is not None:
        raise InsightDecidedByApproval()
    if row.dedupe_key.startswith(PROMOTION_KEY_PREFIX):
        # Marking it actioned here would close the suggestion and change no mode: the owner
        # answers it where it changes the mode (docs/autonomy.md "Promotion").
        raise InsightDecidedByPromotion()
    if action_type is not None and action_type not in {a.get("action_type") for a in row.suggested_actions}:
        raise UnknownSuggestedAction()
    details = {"action_type": action_type} if action_type is not None else {}
    return _change(session, serde, row, InsightStatus.ACTIONED, user_id, request_id, details)


def _locked(session: Session, org_id: uuid.UUID, insight_id: uuid.UUID) -> WorkspaceInsight:
    row = session.scalars(
        select(WorkspaceInsight)
        .where(WorkspaceInsight.org_id == org_id, WorkspaceInsight.id == insight_id)
        .with_for_update()
    ).one_or_none()
    if row is None:
        raise NotFound("No such insight")
    return row


def _change(
    session: Session,
    serde: Serde,
    row: WorkspaceInsight,
    target: InsightStatus,
    user_id: uuid.UUID | None,
    request_id: str,
    details: dict[str, Any],
) -> InsightView:
    """Set the owner's status, audit it and tell the brief through the outbox, atomically (once)."""
    if row.status not in _CHANGES_FROM[target]:
        return view(row)
    row.status = target.value
    row.status_changed_at = session.scalar(select(func.now()))
    row.status_changed_by = user_id
    record_audit(
        session,
        org_id=row.org_id,
        action=_AUDIT_ACTION[target],
        actor_user_id=user_id,
        target_type="workspace_insight",
        target_id=row.id,
        details={"insight_key": row.dedupe_key, "area": row.area, **details},
        request_id=request_id,
    )
    enqueue_record(session, Topics.INSIGHTS, status_record(row, target.value, request_id), serde=serde)
    session.flush()
    return view(row)
