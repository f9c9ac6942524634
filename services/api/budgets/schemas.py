"""Bodies and views of ``/api/v1/budget-policies``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# A cap of at most a billion dollars or a trillion tokens a month: a typo, not a budget, above that.
MAX_COST_MICROS = 10**15
MAX_TOKENS = 10**12


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cost_limit_micros: int | None = Field(
        default=None, gt=0, le=MAX_COST_MICROS, description="monthly cost cap in micro-USD (1 USD = 1,000,000)"
    )
    token_limit: int | None = Field(default=None, gt=0, le=MAX_TOKENS, description="monthly input + output tokens")
    soft_threshold_pct: int = Field(default=80, ge=1, le=100, description="a warning when spend passes this share")
    enabled: bool = True


class OrgBudgetWrite(_Limits):
    """The org's monthly cap, checked before dispatch: reaching it stops new runs until the month ends."""


class AgentBudgetWrite(_Limits):
    """One agent's monthly cap, evaluated after each of its runs."""

    hard_action: Literal["pause_agent", "notify"] = Field(
        default="pause_agent", description="what reaching the cap does: pause the agent, or only tell the owner"
    )


class BudgetPolicyView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    scope: str
    agent_id: uuid.UUID | None
    cost_limit_micros: int | None
    token_limit: int | None
    soft_threshold_pct: int
    hard_action: str
    enabled: bool
    created_at: datetime
    updated_at: datetime
