"""Autonomy and proposed-action views."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints

from switchboard.db.enums import AutonomyMode


class AreaAutonomy(BaseModel):
    area: str
    label: str
    mode: AutonomyMode  # as set (default propose)
    kill_switch: bool
    effective_mode: AutonomyMode  # what agents get: off while a kill switch is on


class ActionAutonomy(BaseModel):
    """One action type (a gated write tool) and its mode."""

    action_type: str
    area: str
    mode: AutonomyMode | None  # its own mode; null: it follows its area
    effective_mode: AutonomyMode  # what agents get: off while its area is off or a kill switch is on


class AutonomyView(BaseModel):
    kill_switch: bool  # the org-wide kill switch
    areas: list[AreaAutonomy]
    actions: list[ActionAutonomy]


class AutonomyUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: AutonomyMode


class ActionAutonomyUpdate(BaseModel):
    """An action type's own mode; ``off`` is its area's to decide (DELETE to follow the area again)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal[AutonomyMode.PROPOSE, AutonomyMode.AUTO]


class KillSwitchUpdate(BaseModel):
    """``area`` null: the org-wide switch; else that area's."""

    model_config = ConfigDict(extra="forbid")

    engaged: bool
    area: str | None = None


class DecisionNote(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, StringConstraints(strip_whitespace=True, max_length=1000)] | None = None


class ActionView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    run_id: uuid.UUID | None
    agent_id: uuid.UUID | None
    area: str
    action_type: str
    proposed_action: dict[str, Any]
    autonomy_tier: str
    status: str
    rationale: str | None
    decided_by: uuid.UUID | None
    decided_at: datetime | None
    executed_at: datetime | None
    execution_result: dict[str, Any] | None
    created_at: datetime
