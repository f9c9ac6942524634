"""Views and bodies of ``/api/v1/members``."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, EmailStr, Field

from switchboard.db.enums import Role

MIN_PASSWORD_LENGTH = 12


class MemberView(BaseModel):
    user_id: uuid.UUID
    email: str
    display_name: str | None
    role: Role
    mfa_enrolled: bool
    last_login_at: datetime | None
    member_since: datetime


class AddMember(BaseModel):
    """Add a person to the org. A new account gets ``password`` (the admin hands it over; the person
    changes it with ``POST /auth/password``); an existing account keeps its own and ignores it."""

    email: EmailStr
    role: Role
    display_name: str | None = Field(default=None, min_length=1, max_length=200)
    password: str | None = Field(default=None, min_length=MIN_PASSWORD_LENGTH, max_length=1024)


class ChangeRole(BaseModel):
    role: Role
