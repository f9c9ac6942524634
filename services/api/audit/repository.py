"""All SQL of the audit domain."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import or_, select, tuple_
from sqlalchemy.orm import Session

from switchboard.db.models.audit import AuditLogEntry


def entries(
    session: Session,
    org_id: uuid.UUID,
    *,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None = None,
    action: str | None = None,
    target_type: str | None = None,
    target_id: str | None = None,
) -> list[AuditLogEntry]:
    """Newest first; ``before`` is the (created_at, id) of the last entry of the previous page."""
    query = select(AuditLogEntry).where(AuditLogEntry.org_id == org_id)
    if before is not None:
        query = query.where(tuple_(AuditLogEntry.created_at, AuditLogEntry.id) < tuple_(*before))
    if action is not None:
        query = query.where(or_(AuditLogEntry.action == action, AuditLogEntry.action.startswith(f"{action}.")))
    if target_type is not None:
        query = query.where(AuditLogEntry.target_type == target_type)
    if target_id is not None:
        query = query.where(AuditLogEntry.target_id == target_id)
    query = query.order_by(AuditLogEntry.created_at.desc(), AuditLogEntry.id.desc()).limit(limit)
    return list(session.scalars(query))
