"""Views of ``/api/v1/followups``."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class FollowupView(BaseModel):
    """A callback an agent (or a person) promised: the conversation's agent is woken at ``due_at``."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    conversation_id: uuid.UUID
    contact_id: uuid.UUID | None
    agent_id: uuid.UUID | None
    created_by_run_id: uuid.UUID | None = Field(description="The run that scheduled it (null when a person did)")
    due_at: datetime
    reason: str
    status: str = Field(description="`scheduled`, `fired`, `cancelled` or `failed`")
    fired_at: datetime | None
    fired_run_id: uuid.UUID | None
    cancelled_at: datetime | None
    created_at: datetime
