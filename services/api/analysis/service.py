"""Listing insights and the owner's dismissal (docs/analysis.md). Sync functions over a Session."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import func, or_, select, tuple_
from sqlalchemy.orm import Session

from services.api.analysis.schemas import InsightView
from services.api.core.errors import NotFound, ValidationFailed
from switchboard.areas import is_area
from switchboard.contracts import Insight, Serde, Topics
from switchboard.contracts.enums import InsightKind
from switchboard.contracts.records import SuggestedAction
from switchboard.db.audit import record_audit
from switchboard.db.enums import InsightStatus
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


def dismiss(
    session: Session, serde: Serde, org_id: uuid.UUID, insight_id: uuid.UUID, user_id: uuid.UUID | None, request_id: str
) -> InsightView:
    """Mark the insight dismissed (idempotent) and tell the brief through the outbox, atomically.

    A later analysis that finds the same thing refreshes the content but leaves it dismissed."""
    row = session.scalars(
        select(WorkspaceInsight)
        .where(WorkspaceInsight.org_id == org_id, WorkspaceInsight.id == insight_id)
        .with_for_update()
    ).one_or_none()
    if row is None:
        raise NotFound("No such insight")
    if row.status != InsightStatus.DISMISSED.value:
        row.status = InsightStatus.DISMISSED.value
        row.status_changed_at = session.scalar(select(func.now()))
        row.status_changed_by = user_id
        record_audit(
            session,
            org_id=org_id,
            action="insight.dismissed",
            actor_user_id=user_id,
            target_type="workspace_insight",
            target_id=row.id,
            details={"insight_key": row.dedupe_key, "area": row.area},
            request_id=request_id,
        )
        record = Insight(
            org_id=org_id,
            request_id=request_id,
            insight_id=row.id,
            insight_key=row.dedupe_key,
            insight_date=row.insight_date,
            kind=InsightKind(row.kind),
            area=row.area,
            title=row.title,
            body=row.body or "",
            status=InsightStatus.DISMISSED.value,
            suggested_actions=tuple(SuggestedAction.model_validate(a) for a in row.suggested_actions),
            run_id=row.run_id,
        )
        enqueue_record(session, Topics.INSIGHTS, record, serde=serde)
        session.flush()
    return view(row)
