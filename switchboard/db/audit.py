"""Writing the audit log without ever writing a secret.

Callers pass structured details; anything whose key looks like a secret
(``api_key``, ``authorization``, ``*_key``, ``*_secret``, passwords, tokens) is
replaced by ``"[redacted]"`` before it reaches the row, at any depth. The
audit log is read by humans and exported: it must stay safe to show.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from switchboard.db.enums import ActorKind
from switchboard.db.models.audit import AuditLogEntry
from switchboard.observability.scrubbing import is_secret_key

REDACTED = "[redacted]"

__all__ = ["REDACTED", "is_secret_key", "record_audit", "redact"]


def redact(value: Any) -> Any:
    """A copy of ``value`` with every secret-looking key's value replaced."""
    if isinstance(value, Mapping):
        return {str(k): (REDACTED if is_secret_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return REDACTED
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def record_audit(
    session: Session,
    *,
    org_id: uuid.UUID,
    action: str,
    actor_user_id: uuid.UUID | None = None,
    actor_kind: ActorKind = ActorKind.USER,
    actor_ref: str | None = None,
    target_type: str | None = None,
    target_id: uuid.UUID | str | None = None,
    details: Mapping[str, Any] | None = None,
    request_id: str | None = None,
) -> AuditLogEntry:
    """Add an audit entry to the session (flushed with the caller's unit of work)."""
    entry = AuditLogEntry(
        org_id=org_id,
        action=action,
        actor_kind=str(actor_kind),
        actor_user_id=actor_user_id,
        actor_ref=actor_ref,
        target_type=target_type,
        target_id=None if target_id is None else str(target_id),
        details=redact(dict(details or {})),
        request_id=request_id,
    )
    session.add(entry)
    return entry
