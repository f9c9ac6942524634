"""Request and response bodies of the identity endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, EmailStr, Field

from switchboard.db.enums import ApiTokenKind, Role


class LoginRequest(BaseModel):
    email: EmailStr
    password: str = Field(min_length=1, max_length=1024)
    # Required for a session that may perform admin writes; without it the session is read/manage only.
    totp_code: str | None = Field(default=None, pattern=r"^\d{6}$")
    # Which organization to sign in to, when the user belongs to several.
    org_id: uuid.UUID | None = None


class ChangePassword(BaseModel):
    current_password: str = Field(min_length=1, max_length=1024)
    new_password: str = Field(min_length=12, max_length=1024)


class IssuedToken(BaseModel):
    """A token as issued: the plaintext is shown this once and never again."""

    id: uuid.UUID
    token: str
    token_prefix: str
    org_id: uuid.UUID
    role: Role
    kind: ApiTokenKind
    mfa_verified: bool
    expires_at: datetime | None


class TokenView(BaseModel):
    id: uuid.UUID
    name: str
    token_prefix: str
    role: Role
    kind: ApiTokenKind
    mfa_verified: bool
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None


class CreateTokenRequest(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    role: Role = Role.VIEWER
    expires_in_days: int | None = Field(default=90, ge=1, le=3650)


class Me(BaseModel):
    org_id: uuid.UUID
    user_id: uuid.UUID | None
    role: Role
    token_kind: ApiTokenKind
    mfa_verified: bool
    mfa_enrolled: bool


class TotpEnrollment(BaseModel):
    """Scan ``otpauth_uri`` (or type ``secret``) into an authenticator app, then confirm a code."""

    secret: str
    otpauth_uri: str


class TotpConfirm(BaseModel):
    code: str = Field(pattern=r"^\d{6}$")


class Bootstrapped(BaseModel):
    org_id: uuid.UUID
    user_id: uuid.UUID
    token: str
