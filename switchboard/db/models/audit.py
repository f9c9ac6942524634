"""The audit log: who did what to which object, in which request. Never a secret."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, CreatedAt, OrgScoped, UUIDPrimaryKey, check_in
from switchboard.db.enums import ActorKind


class AuditLogEntry(UUIDPrimaryKey, OrgScoped, CreatedAt, Base):
    """One sensitive mutation (``ai_agent.published``, ``ai_credential.created``...).

    Append-only: the application role may INSERT and SELECT but not UPDATE or
    DELETE (revoked by the migration environment). Write it with
    ``switchboard.db.audit.record_audit``, which redacts secret-looking keys.
    """

    __tablename__ = "audit_log"
    __table_args__ = (
        check_in("actor_kind", ActorKind),
        CheckConstraint("action ~ '^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$'", name="action_format"),
        CheckConstraint("jsonb_typeof(details) = 'object'", name="details_object"),
        Index(None, "org_id", "created_at"),
        Index(None, "org_id", "target_type", "target_id"),
    )

    actor_kind: Mapped[str] = mapped_column(server_default=text("'user'"))
    actor_user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    # The API token, agent or service name when the actor is not a person.
    actor_ref: Mapped[str | None]
    # Dotted verb: "<object>.<verb>", e.g. "ai_agent.published".
    action: Mapped[str]
    target_type: Mapped[str | None]
    target_id: Mapped[str | None]
    details: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    request_id: Mapped[str | None]
