"""The few questions asked before the tenant is known, answered by narrow
SECURITY DEFINER functions (created by migration 0001, owned by the owner role).

Row-level security hides every tenant row until ``app.org_id`` is set, but some
requests must first find out *which* org they belong to: a bearer token, a
webhook naming a channel session, a user choosing among their orgs, the
scheduler fanning out. Each function returns only the routing facts for one
exact key (a token hash, a session name, a user id), never tenant content; the
caller then opens a ``tenant_transaction`` for the org it got back.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from switchboard.db.enums import ApiTokenKind, Role

# Names of the SQL functions, for grants and tests.
LOOKUP_FUNCTIONS: tuple[str, ...] = (
    "lookup_api_token",
    "lookup_user_memberships",
    "lookup_channel_session",
    # The per-session webhook URL (revision 0027), and a name's uniqueness per WAHA server (0029).
    "lookup_channel_session_by_id",
    "session_name_taken",
    "list_organization_ids",
    "list_due_followups",
    # The dispatcher's cross-org questions (revision 0008).
    "list_orgs_over_budget",
    "admit_org_runs",
    # The usage ledger's fold (revision 0019).
    "fold_usage_entries",
    # The notifier's sweep of stale delivery claims (revision 0020).
    "expire_stale_deliveries",
    # The brief's morning digests (revision 0021).
    "list_orgs_missing_digest",
    # The notifier's sweep of notifications a crashed notifier left pending (revision 0022).
    "list_pending_notifications",
    # The runners' sweep of runs whose runner died (revision 0028).
    "list_stale_runs",
    # The notifier's morning push of the Home digest (revision 0033).
    "list_due_digests",
)


def hash_api_token(token: str) -> bytes:
    """The SHA-256 stored in ``api_tokens.token_hash`` (tokens are random, so no salt is needed)."""
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True, slots=True)
class ApiTokenIdentity:
    token_id: uuid.UUID
    org_id: uuid.UUID
    user_id: uuid.UUID | None
    role: Role
    expires_at: datetime | None
    kind: ApiTokenKind
    mfa_verified: bool


@dataclass(frozen=True, slots=True)
class MembershipView:
    org_id: uuid.UUID
    org_name: str
    org_slug: str
    role: Role


@dataclass(frozen=True, slots=True)
class ChannelSessionRoute:
    channel_session_id: uuid.UUID
    org_id: uuid.UUID
    status: str


@dataclass(frozen=True, slots=True)
class OrgOverBudget:
    org_id: uuid.UUID
    # Which monthly cap is reached: "tokens" or "cost".
    exceeded: str


@dataclass(frozen=True, slots=True)
class RunAdmission:
    # Runs admitted now (0..requested); the rest must wait for the next window.
    admitted: int
    # End of the current window, by the database clock: when the refused ones may retry.
    window_ends_at: datetime
    # The limit that applied (the org's own, or the caller's default).
    limit_per_window: int


@dataclass(frozen=True, slots=True)
class DueFollowup:
    followup_id: uuid.UUID
    org_id: uuid.UUID
    due_at: datetime


def lookup_api_token(db: Session | Connection, token_hash: bytes) -> ApiTokenIdentity | None:
    """The active (not revoked, not expired) token with this hash, or None."""
    row = db.execute(text("SELECT * FROM lookup_api_token(:h)"), {"h": token_hash}).one_or_none()
    if row is None:
        return None
    return ApiTokenIdentity(
        row.token_id, row.org_id, row.user_id, Role(row.role), row.expires_at, ApiTokenKind(row.kind), row.mfa_verified
    )


def lookup_user_memberships(db: Session | Connection, user_id: uuid.UUID) -> list[MembershipView]:
    """The orgs a user belongs to, with their role in each (for login and org switching)."""
    rows = db.execute(text("SELECT * FROM lookup_user_memberships(:u)"), {"u": user_id}).all()
    return [MembershipView(r.org_id, r.org_name, r.org_slug, Role(r.role)) for r in rows]


def lookup_channel_session(
    db: Session | Connection, provider: str, external_session: str
) -> ChannelSessionRoute | None:
    """Which org and channel session the name-routed webhook for ``external_session`` belongs to
    (only sessions that hold their name alone: ``routes_by_name``)."""
    row = db.execute(
        text("SELECT * FROM lookup_channel_session(:p, :s)"),
        {"p": provider, "s": external_session},
    ).one_or_none()
    if row is None:
        return None
    return ChannelSessionRoute(row.channel_session_id, row.org_id, row.status)


def lookup_channel_session_by_id(
    db: Session | Connection, provider: str, channel_session_id: uuid.UUID
) -> tuple[ChannelSessionRoute, str] | None:
    """The org and status of the session a per-session webhook URL names, with its name."""
    row = db.execute(
        text("SELECT * FROM lookup_channel_session_by_id(:p, :i)"),
        {"p": provider, "i": channel_session_id},
    ).one_or_none()
    if row is None:
        return None
    return ChannelSessionRoute(row.channel_session_id, row.org_id, row.status), row.external_session


def lookup_session_name_on_server(db: Session | Connection, provider: str, base_url: str, name: str) -> bool:
    """Whether any org's session has ``name`` on the WAHA server ``base_url`` ('' for the platform's)."""
    return bool(
        db.execute(
            text("SELECT session_name_taken(:p, :b, :n)"), {"p": provider, "b": base_url, "n": name}
        ).scalar_one()
    )


def list_organization_ids(db: Session | Connection) -> list[uuid.UUID]:
    """Every org id, for platform fan-out (the daily analysis, digest materialization)."""
    return list(db.execute(text("SELECT * FROM list_organization_ids()")).scalars())


def list_due_followups(db: Session | Connection, until: datetime, limit: int = 100) -> list[DueFollowup]:
    """Scheduled follow-ups due by ``until``, oldest first, across orgs (ids only)."""
    rows = db.execute(text("SELECT * FROM list_due_followups(:until, :limit)"), {"until": until, "limit": limit}).all()
    return [DueFollowup(r.followup_id, r.org_id, r.due_at) for r in rows]


def list_orgs_over_budget(db: Session | Connection, month: date) -> list[OrgOverBudget]:
    """Orgs whose enabled org-scope budget policy is reached for ``month`` (ids and which cap only)."""
    rows = db.execute(text("SELECT * FROM list_orgs_over_budget(:m)"), {"m": month}).all()
    return [OrgOverBudget(r.org_id, r.exceeded) for r in rows]


def admit_org_runs(
    db: Session | Connection, org_id: uuid.UUID, requested: int, *, window_seconds: int, default_limit: int
) -> RunAdmission:
    """Take up to ``requested`` runs from the org's fixed-window rate limit, atomically.

    The limit is ``organizations.rate_limit_runs_per_minute`` per window when the org
    exists, else ``default_limit``. Call inside a transaction the caller commits: the
    counter row stays locked until then, which is what serializes concurrent workers.
    """
    row = db.execute(
        text("SELECT * FROM admit_org_runs(:o, :n, :w, :d)"),
        {"o": org_id, "n": requested, "w": window_seconds, "d": default_limit},
    ).one()
    return RunAdmission(int(row.admitted), row.window_ends_at, int(row.limit_per_window))
