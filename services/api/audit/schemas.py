"""Audit log entries as the API shows them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel


class AuditEntryView(BaseModel):
    id: uuid.UUID
    created_at: datetime
    actor_kind: str
    actor_user_id: uuid.UUID | None
    actor_ref: str | None
    action: str
    target_type: str | None
    target_id: str | None
    details: dict[str, Any]
    request_id: str | None
