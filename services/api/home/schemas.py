"""Home, usage and budget-incident views."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from switchboard.db.todos import MAX_TODO_CHARS


class DailyBriefView(BaseModel):
    """The stored digest of one org-local day (``digest``: see docs/brief.md for its shape)."""

    date: date
    digest: dict[str, Any]
    updated_at: datetime


class TodoCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TODO_CHARS)]
    conversation_id: uuid.UUID | None = None


class HomePrefs(BaseModel):
    """Which digest sections and business areas the Home shows first, in this order."""

    model_config = ConfigDict(extra="forbid")

    pinned_sections: list[str] = Field(default_factory=list, max_length=10, description="of pulse, done, todo, planets")
    pinned_areas: list[str] = Field(default_factory=list, max_length=50, description="area slugs (GET /autonomy)")


class TodoView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    text: str
    source: str
    conversation_id: uuid.UUID | None
    status: str
    created_at: datetime
    done_at: datetime | None


class UsageFigures(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    run_count: int = 0


class AgentUsage(UsageFigures):
    agent_id: uuid.UUID
    agent_name: str | None


class UsageView(BaseModel):
    """Month-to-date figures as the runner counted them (what budgets and billing read)."""

    month: str = Field(description="YYYY-MM (UTC calendar month)")
    organization: UsageFigures
    agents: list[AgentUsage]


class BudgetIncidentView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    created_at: datetime
    scope: str
    severity: str
    agent_id: uuid.UUID | None
    policy_id: uuid.UUID | None
    run_id: uuid.UUID | None
    period_month: date
    spent_micros: int
    limit_micros: int | None
    spent_tokens: int
    limit_tokens: int | None
    action_taken: str
    notified_at: datetime | None
    resolved_at: datetime | None
