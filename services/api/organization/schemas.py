"""Views and bodies of ``/api/v1/organization``."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from switchboard.time_zones import check_time_zone


class OrganizationView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    slug: str
    time_zone: str
    rate_limit_runs_per_minute: int
    autonomy_kill_switch: bool
    digest_hour: int | None
    created_at: datetime
    updated_at: datetime


# Fields where an explicit null is a value (turn it off), not "leave it as it is".
NULLABLE_FIELDS = frozenset({"digest_hour"})


class OrganizationPatch(BaseModel):
    """What an admin may change; omitted fields stay as they are (as does a null, except where
    null means "off": ``digest_hour``)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    time_zone: str | None = Field(
        default=None, min_length=1, max_length=64, description="IANA zone: the Home's day, the analyses' hour"
    )
    rate_limit_runs_per_minute: int | None = Field(
        default=None, ge=1, le=100_000, description="runs the dispatcher starts per minute for the org"
    )
    digest_hour: int | None = Field(
        default=None,
        ge=0,
        le=23,
        description="local hour from which the day's Home digest is sent to the org webhook; null: never",
    )

    def changes(self) -> dict[str, object]:
        """The fields to write: every one sent, a null only where it means something."""
        sent = self.model_dump(exclude_unset=True)
        return {field: value for field, value in sent.items() if value is not None or field in NULLABLE_FIELDS}

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
