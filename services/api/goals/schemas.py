"""Goal views."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict


class GoalView(BaseModel):
    """One ``/goal`` or ``/loop`` with what it may spend and what it spent (micro-USD)."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    conversation_id: uuid.UUID
    agent_id: uuid.UUID
    version_id: uuid.UUID
    kind: str  # goal | loop
    goal: str
    status: str  # active | done | budget_spent | stopped
    budget_micros: int
    segment_budget_micros: int
    spent_micros: int
    segments: int
    last_run_id: uuid.UUID | None
    end_reason: str | None
    created_at: datetime
    updated_at: datetime
