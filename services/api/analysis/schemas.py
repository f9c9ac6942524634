"""Insight views of ``/api/v1/insights``."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class InsightView(BaseModel):
    """One ``workspace_insights`` row: what an analysis (or the system) found, and the owner's status."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    insight_key: str
    kind: str
    area: str
    severity: str
    title: str
    body: str | None
    suggested_actions: list[dict[str, Any]]
    insight_date: date
    status: str
    status_changed_at: datetime | None
    run_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime


class InsightAction(BaseModel):
    """Body of ``POST /insights/{id}:action`` (optional): which suggested action the owner took."""

    model_config = ConfigDict(extra="forbid")

    action_type: str | None = Field(default=None, min_length=1, max_length=64)
