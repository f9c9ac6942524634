"""Identity rules: bootstrap, login with a second factor, tokens, TOTP enrollment.

Functions take a sync ``Session`` whose transaction the caller owns (the API
runs them through ``AsyncSession.run_sync``; the CLI with a plain Session) and
never commit.
"""

from __future__ import annotations

import base64
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from services.api.core.errors import Conflict, NotFound, Unauthorized, ValidationFailed
from services.api.core.security import (
    hash_password,
    new_token,
    new_totp_secret,
    totp_step,
    totp_uri,
    verify_password,
)
from services.api.identity import repository
from switchboard.crypto import KeyRing, Sealed
from switchboard.db.audit import record_audit
from switchboard.db.enums import ActorKind, ApiTokenKind, Role
from switchboard.db.lookups import lookup_user_memberships
from switchboard.db.models.tenancy import ApiToken, Membership, Organization, User
from switchboard.db.session import set_tenant

SESSION_TTL = timedelta(hours=12)


class WrongPassword(ValidationFailed):
    """422, not 401: the caller's token is fine, the password they typed is not."""

    code = "current_password_wrong"
    default_message = "The current password is wrong"


@dataclass(frozen=True)
class NewToken:
    row: ApiToken
    plaintext: str


def _now() -> datetime:
    return datetime.now(UTC)


def _slug(name: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "org"
    if len(base) < 2:
        base = f"{base}-org"
    # 48 random bits: with 24 a shared database of a few thousand same-named orgs collided.
    return f"{base}-{secrets.token_hex(6)}"


def _totp_aad(user_id: uuid.UUID) -> bytes:
    return f"users.mfa_totp:{user_id}".encode()


def mint_token(
    session: Session,
    *,
    org_id: uuid.UUID,
    name: str,
    role: Role,
    kind: ApiTokenKind,
    mfa_verified: bool,
    user_id: uuid.UUID | None,
    created_by: uuid.UUID | None,
    expires_at: datetime | None,
) -> NewToken:
    """Insert a token row (hash only) and return the plaintext once."""
    plaintext, token_hash, prefix = new_token()
    row = ApiToken(
        org_id=org_id,
        name=name,
        token_prefix=prefix,
        token_hash=token_hash,
        role=role.value,
        kind=kind.value,
        mfa_verified=mfa_verified,
        user_id=user_id,
        created_by=created_by,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return NewToken(row=row, plaintext=plaintext)


def bootstrap_organization(
    session: Session, *, org_name: str, email: str, password: str | None = None, time_zone: str = "UTC"
) -> tuple[uuid.UUID, uuid.UUID, str]:
    """Create an org, its first admin user and an admin automation token: (org_id, user_id, token).

    The token is marked MFA-verified: whoever runs this controls the deployment's
    database credentials, a stronger proof than a TOTP code. It is shown once and never
    expires; its holder ends it with ``POST /api/v1/auth/logout``, any admin with
    ``DELETE /api/v1/tokens/{id}`` (docs/security.md, "The bootstrap token").
    """
    org_id = uuid.uuid4()
    set_tenant(session, org_id)
    user = repository.user_by_email(session, email)
    if user is None:
        user = User(email=email, password_hash=hash_password(password) if password else None)
        session.add(user)
    elif password:
        user.password_hash = hash_password(password)
    session.add(Organization(id=org_id, name=org_name, slug=_slug(org_name), time_zone=time_zone))
    session.flush()
    session.add(Membership(org_id=org_id, user_id=user.id, role=Role.ADMIN.value))
    token = mint_token(
        session,
        org_id=org_id,
        name="bootstrap admin token",
        role=Role.ADMIN,
        kind=ApiTokenKind.API,
        mfa_verified=True,
        user_id=user.id,
        created_by=user.id,
        expires_at=None,
    )
    record_audit(
        session,
        org_id=org_id,
        action="organization.bootstrapped",
        actor_kind=ActorKind.SYSTEM,
        actor_ref="switchboard admin bootstrap",
        target_type="organization",
        target_id=org_id,
        details={"admin_email": email, "token_prefix": token.row.token_prefix},
    )
    return org_id, user.id, token.plaintext


def _use_totp_step(session: Session, user: User, step: int) -> bool:
    """Spend a TOTP time step, once: a conditional update, so two logins with the same code at the
    same moment cannot both pass (read first and written after, both saw the old step)."""
    used = session.scalar(
        update(User)
        .where(User.id == user.id, or_(User.mfa_last_step.is_(None), User.mfa_last_step < step))
        .values(mfa_last_step=step)
        .returning(User.id)
        .execution_options(synchronize_session=False)
    )
    if used is None:
        return False
    session.refresh(user, ["mfa_last_step"])
    return True


def login(
    session: Session, keyring: KeyRing, *, email: str, password: str, totp_code: str | None, org_id: uuid.UUID | None
) -> NewToken:
    """Exchange credentials for a session token; MFA-verified only with a valid TOTP code."""
    user = repository.user_by_email(session, email)
    # Checked whatever the email: an unknown one must cost the same scrypt as a wrong password, or
    # the answer's timing tells which emails have accounts (verify_password spends it on a decoy).
    password_ok = verify_password(password, user.password_hash if user is not None else None)
    if user is None or user.disabled_at is not None or not password_ok:
        raise Unauthorized("Email or password is wrong")
    memberships = lookup_user_memberships(session, user.id)
    chosen = [m for m in memberships if org_id is None or m.org_id == org_id]
    if not chosen:
        raise Unauthorized("You are not a member of that organization")
    if len(chosen) > 1:
        raise ValidationFailed(
            "You belong to several organizations: say which with org_id",
            details={"org_ids": [str(m.org_id) for m in chosen]},
        )
    membership = chosen[0]
    mfa_verified = False
    if totp_code is not None:
        secret = _totp_secret(user, keyring)
        if secret is None or user.mfa_enabled_at is None:
            raise Unauthorized("No second factor is enrolled for this user")
        step = totp_step(secret, totp_code)
        if step is None:
            raise Unauthorized("The second-factor code is wrong or expired")
        if not _use_totp_step(session, user, step):
            raise Unauthorized("This second-factor code was already used: wait for the next one")
        mfa_verified = True
    set_tenant(session, membership.org_id)
    user.last_login_at = _now()
    token = mint_token(
        session,
        org_id=membership.org_id,
        name="login session",
        role=membership.role,
        kind=ApiTokenKind.SESSION,
        mfa_verified=mfa_verified,
        user_id=user.id,
        created_by=user.id,
        expires_at=_now() + SESSION_TTL,
    )
    record_audit(
        session,
        org_id=membership.org_id,
        action="user.logged_in",
        actor_user_id=user.id,
        target_type="user",
        target_id=user.id,
        details={"mfa_verified": mfa_verified},
    )
    return token


def change_password(session: Session, *, org_id: uuid.UUID, user_id: uuid.UUID, current: str, new: str) -> None:
    """Replace the user's password after checking the current one; audited (never the passwords)."""
    user = repository.user_by_id(session, user_id)
    if user is None or not verify_password(current, user.password_hash):
        raise WrongPassword()
    if current == new:
        raise ValidationFailed("The new password must differ from the current one", details={"field": "new_password"})
    user.password_hash = hash_password(new)
    record_audit(
        session,
        org_id=org_id,
        action="user.password_changed",
        actor_user_id=user.id,
        target_type="user",
        target_id=user.id,
    )
    session.flush()


def _totp_secret(user: User, keyring: KeyRing) -> bytes | None:
    if user.mfa_totp_ciphertext is None or user.mfa_totp_iv is None or user.mfa_totp_tag is None:
        return None
    sealed = Sealed(user.mfa_totp_ciphertext, user.mfa_totp_iv, user.mfa_totp_tag, str(user.mfa_totp_key_id))
    return keyring.open(sealed, aad=_totp_aad(user.id))


def start_totp_enrollment(session: Session, keyring: KeyRing, *, user_id: uuid.UUID) -> tuple[str, str]:
    """Store a new (not yet enabled) TOTP secret; return (base32 secret, otpauth URI)."""
    user = repository.user_by_id(session, user_id)
    if user is None:
        raise NotFound("No such user")
    if user.mfa_enabled_at is not None:
        raise Conflict("A second factor is already enrolled")
    secret = new_totp_secret()
    sealed = keyring.seal(secret, aad=_totp_aad(user.id))
    user.mfa_totp_ciphertext, user.mfa_totp_iv, user.mfa_totp_tag = sealed.ciphertext, sealed.iv, sealed.tag
    user.mfa_totp_key_id = sealed.key_id
    return base64.b32encode(secret).decode().rstrip("="), totp_uri(secret, account=user.email)


def confirm_totp_enrollment(
    session: Session, keyring: KeyRing, *, user_id: uuid.UUID, org_id: uuid.UUID, code: str
) -> None:
    user = repository.user_by_id(session, user_id)
    if user is None:
        raise NotFound("No such user")
    secret = _totp_secret(user, keyring)
    if secret is None:
        raise Conflict("Start the enrollment first")
    if user.mfa_enabled_at is not None:
        raise Conflict("A second factor is already enrolled")
    step = totp_step(secret, code)
    if step is None:
        raise ValidationFailed("The code does not match; check the authenticator's clock")
    user.mfa_enabled_at = _now()
    user.mfa_last_step = step  # the enrollment code cannot sign in afterwards
    record_audit(
        session, org_id=org_id, action="user.mfa_enrolled", actor_user_id=user.id, target_type="user", target_id=user.id
    )


def create_api_token(
    session: Session,
    *,
    org_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    actor_role: Role,
    name: str,
    role: Role,
    expires_in_days: int | None,
    request_id: str | None,
) -> NewToken:
    """An automation token; never more powerful than its creator, never MFA-verified."""
    if role.rank > actor_role.rank:
        raise ValidationFailed("A token cannot have a higher role than its creator")
    expires = _now() + timedelta(days=expires_in_days) if expires_in_days else None
    token = mint_token(
        session,
        org_id=org_id,
        name=name,
        role=role,
        kind=ApiTokenKind.API,
        mfa_verified=False,
        user_id=actor_user_id,
        created_by=actor_user_id,
        expires_at=expires,
    )
    record_audit(
        session,
        org_id=org_id,
        action="api_token.created",
        actor_user_id=actor_user_id,
        target_type="api_token",
        target_id=token.row.id,
        request_id=request_id,
        details={"name": name, "role": role.value, "token_prefix": token.row.token_prefix},
    )
    return token


def revoke_api_token(
    session: Session, *, org_id: uuid.UUID, token_id: uuid.UUID, actor_user_id: uuid.UUID | None, request_id: str | None
) -> None:
    if not repository.revoke_token(session, org_id, token_id, _now()):
        raise NotFound("No such token")
    record_audit(
        session,
        org_id=org_id,
        action="api_token.revoked",
        actor_user_id=actor_user_id,
        target_type="api_token",
        target_id=token_id,
        request_id=request_id,
    )
