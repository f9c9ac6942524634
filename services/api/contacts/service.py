"""Finding and correcting contacts. Sync functions over the request's org-scoped session; they
never commit (the request does).

Why correcting matters: the name and phone the channel gave are often a nickname or missing,
and they are what the agents see (``crm_search_contacts``, the pseudonymizer's aliases) and
what the inbox shows. The audit records which fields changed, never their values (they are
personal data, and the audit log is append-only).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from services.api.core.errors import Conflict, NotFound
from services.api.core.pagination import older_than
from switchboard.db.audit import record_audit
from switchboard.db.models.channels import Contact

Cursor = tuple[datetime, uuid.UUID] | None


class ContactErased(Conflict):
    code = "contact_erased"
    default_message = "This contact was erased: its personal data cannot be written back"


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def list_contacts(
    session: Session, org_id: uuid.UUID, *, query: str | None, limit: int, before: Cursor
) -> list[Contact]:
    """Newest first; ``query`` matches part of the name, phone, e-mail or channel id (any case)."""
    statement = select(Contact).where(Contact.org_id == org_id)
    if query:
        pattern = f"%{_escape_like(query.strip())}%"
        statement = statement.where(
            or_(
                Contact.display_name.ilike(pattern, escape="\\"),
                Contact.phone_number.ilike(pattern, escape="\\"),
                Contact.email.ilike(pattern, escape="\\"),
                Contact.external_id.ilike(pattern, escape="\\"),
            )
        )
    if before is not None:
        statement = statement.where(older_than(Contact.created_at, Contact.id, before))
    return list(session.scalars(statement.order_by(Contact.created_at.desc(), Contact.id.desc()).limit(limit)))


def get_contact(session: Session, org_id: uuid.UUID, contact_id: uuid.UUID, *, for_update: bool = False) -> Contact:
    statement = select(Contact).where(Contact.org_id == org_id, Contact.id == contact_id)
    row = session.scalars(statement.with_for_update() if for_update else statement).one_or_none()
    if row is None:
        raise NotFound("No such contact")
    return row


def contacts_by_id(session: Session, org_id: uuid.UUID, ids: Iterable[uuid.UUID | None]) -> dict[uuid.UUID, Contact]:
    """The contacts of a page of conversations, in one query."""
    wanted = {i for i in ids if i is not None}
    if not wanted:
        return {}
    rows = session.scalars(select(Contact).where(Contact.org_id == org_id, Contact.id.in_(wanted)))
    return {row.id: row for row in rows}


def update_contact(
    session: Session,
    org_id: uuid.UUID,
    contact_id: uuid.UUID,
    changes: Mapping[str, Any],
    *,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> Contact:
    """Apply the fields that were sent (``null`` clears); audit ``contact.updated`` with their names."""
    row = get_contact(session, org_id, contact_id, for_update=True)
    if row.erased_at is not None and any(value is not None for value in changes.values()):
        raise ContactErased()
    changed = sorted(name for name, value in changes.items() if getattr(row, name) != value)
    for name in changed:
        setattr(row, name, changes[name])
    if changed:
        record_audit(
            session,
            org_id=org_id,
            action="contact.updated",
            actor_user_id=actor_user_id,
            target_type="contact",
            target_id=row.id,
            details={"fields": changed},
            request_id=request_id,
        )
    session.flush()
    session.refresh(row)
    return row
