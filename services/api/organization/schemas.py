"""Views and bodies of ``/api/v1/organization``."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.api.agents.schemas import check_time_zone


class OrganizationView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    slug: str
    time_zone: str
    rate_limit_runs_per_minute: int
    autonomy_kill_switch: bool
    created_at: datetime
    updated_at: datetime


class OrganizationPatch(BaseModel):
    """What an admin may change; omitted fields stay as they are."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    time_zone: str | None = Field(
        default=None, min_length=1, max_length=64, description="IANA zone: the Home's day, the analyses' hour"
    )
    rate_limit_runs_per_minute: int | None = Field(
        default=None, ge=1, le=100_000, description="runs the dispatcher starts per minute for the org"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        stripped = value.strip()
        if not stripped:
            raise ValueError("name must not be blank")
        return stripped

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return None if value is None else check_time_zone(value)
