"""All SQL of the org webhook domain (one row per org)."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.db.models.notifications import OrgWebhook


def of_org(session: Session, org_id: uuid.UUID, *, for_update: bool = False) -> OrgWebhook | None:
    query = select(OrgWebhook).where(OrgWebhook.org_id == org_id)
    if for_update:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()
