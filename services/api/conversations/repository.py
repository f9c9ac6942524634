"""All SQL of the conversations domain (sync Session; the API calls it through ``run_sync``)."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.db.models.channels import Conversation


def by_id(
    session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID, *, for_update: bool = False
) -> Conversation | None:
    query = select(Conversation).where(Conversation.org_id == org_id, Conversation.id == conversation_id)
    if for_update:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()
