"""Who uses Switchboard: organizations (tenants), users, memberships, API tokens.

Users are global (one identity may belong to several organizations); everything
else is scoped to an organization and protected by row-level security.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from switchboard.db.base import Base, OrgScoped, Timestamps, UUIDPrimaryKey, check_in
from switchboard.db.enums import ApiTokenKind, Role


class Organization(UUIDPrimaryKey, Timestamps, Base):
    """A tenant. Its row is visible only when ``app.org_id`` is its own id.

    Creating one therefore means: pick the id in Python, open a tenant
    transaction for it, insert the organization and its first membership.
    """

    __tablename__ = "organizations"
    __table_args__ = (
        CheckConstraint("char_length(name) BETWEEN 1 AND 200", name="name_length"),
        CheckConstraint("slug ~ '^[a-z0-9][a-z0-9-]{1,62}$'", name="slug_format"),
        CheckConstraint("rate_limit_runs_per_minute > 0", name="rate_limit_positive"),
        CheckConstraint("digest_hour IS NULL OR digest_hour BETWEEN 0 AND 23", name="digest_hour_range"),
    )

    name: Mapped[str]
    slug: Mapped[str] = mapped_column(unique=True)
    # IANA zone used for business hours and the "today" of the Home digest.
    time_zone: Mapped[str] = mapped_column(server_default=text("'UTC'"))
    # Runs per minute the dispatcher starts for this org [004 D7]; beyond it dispatches wait.
    rate_limit_runs_per_minute: Mapped[int] = mapped_column(Integer, server_default=text("60"))
    # Local hour from which the notifier sends the day's Home digest to the org webhook; NULL: never.
    digest_hour: Mapped[int | None] = mapped_column(SmallInteger, server_default=text("8"))
    # Org-level kill switch of autonomy: when on, no write tool runs in any area.
    autonomy_kill_switch: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    autonomy_kill_switch_changed_at: Mapped[datetime | None]
    autonomy_kill_switch_changed_by: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )

    memberships: Mapped[list[Membership]] = relationship(
        back_populates="organization", lazy="raise", passive_deletes=True
    )


class User(UUIDPrimaryKey, Timestamps, Base):
    """A person's identity, shared across organizations (global table, no RLS)."""

    __tablename__ = "users"
    __table_args__ = (
        Index("uq_users_email_lower", func.lower(text("email")), unique=True),
        CheckConstraint("position('@' in email) > 1", name="email_format"),
        CheckConstraint("mfa_totp_iv IS NULL OR octet_length(mfa_totp_iv) = 12", name="mfa_totp_iv_length"),
        CheckConstraint(
            "(mfa_totp_ciphertext IS NULL) = (mfa_totp_iv IS NULL)"
            " AND (mfa_totp_ciphertext IS NULL) = (mfa_totp_tag IS NULL)"
            " AND (mfa_totp_ciphertext IS NULL) = (mfa_totp_key_id IS NULL)",
            name="mfa_totp_complete",
        ),
    )

    email: Mapped[str]
    display_name: Mapped[str | None]
    # A slow hash (argon2/scrypt) of the password; NULL for users who only use tokens or SSO.
    password_hash: Mapped[str | None]
    # TOTP secret for the second factor, AES-GCM encrypted like provider keys.
    mfa_totp_ciphertext: Mapped[bytes | None]
    mfa_totp_iv: Mapped[bytes | None]
    mfa_totp_tag: Mapped[bytes | None]
    mfa_totp_key_id: Mapped[str | None]
    mfa_enabled_at: Mapped[datetime | None]
    # The last TOTP time step accepted: a code is good once (a replayed one is refused).
    mfa_last_step: Mapped[int | None] = mapped_column(BigInteger)
    last_login_at: Mapped[datetime | None]
    disabled_at: Mapped[datetime | None]

    memberships: Mapped[list[Membership]] = relationship(back_populates="user", lazy="raise", passive_deletes=True)


class Membership(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A user's role in one organization (viewer < manager < admin)."""

    __tablename__ = "memberships"
    __table_args__ = (
        check_in("role", Role),
        UniqueConstraint("org_id", "user_id"),
    )

    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(server_default=text("'viewer'"))

    organization: Mapped[Organization] = relationship(back_populates="memberships", lazy="raise")
    user: Mapped[User] = relationship(back_populates="memberships", lazy="raise")


class ApiToken(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A bearer token for REST clients. Only a SHA-256 of the token is stored.

    Authentication looks the hash up through ``lookup_api_token`` (a narrow
    SECURITY DEFINER function), because the org is not known before the token is.
    """

    __tablename__ = "api_tokens"
    __table_args__ = (
        check_in("role", Role),
        check_in("kind", ApiTokenKind),
        CheckConstraint("octet_length(token_hash) = 32", name="token_hash_sha256"),
        CheckConstraint("char_length(token_prefix) BETWEEN 1 AND 16", name="token_prefix_length"),
        CheckConstraint("expires_at IS NULL OR expires_at > created_at", name="expires_after_created"),
        Index(None, "org_id", "created_at"),
    )

    name: Mapped[str]
    # The first characters of the token, shown in lists so a user can tell tokens apart.
    token_prefix: Mapped[str]
    token_hash: Mapped[bytes] = mapped_column(unique=True)
    role: Mapped[str]
    # The user the token acts for, when it was minted by one.
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    created_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    # ``session`` tokens come from a login; ``api`` tokens are minted for scripts and automation.
    kind: Mapped[str] = mapped_column(server_default=text("'api'"))
    # True only when the holder proved a second factor (TOTP) when the token was issued [004 §7].
    mfa_verified: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
