"""The org's people and their roles [SPEC §3, 004 §7] (docs/api.md "Members").

Tokens carry the role they were minted with, so a change of role must reach them: removing a
member revokes every token of that person in this org, and a demotion revokes those whose
role is above the new one (the person signs in again). The last admin can be neither removed
nor demoted: an org without an admin could never be administered again. Sync functions over
the request's org-scoped session; they never commit.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from services.api.core.errors import Conflict, NotFound, ValidationFailed
from services.api.core.security import hash_password
from services.api.members.schemas import AddMember, MemberView
from switchboard.db.audit import record_audit
from switchboard.db.enums import Role
from switchboard.db.models.tenancy import ApiToken, Membership, User


class AlreadyMember(Conflict):
    code = "member_exists"
    default_message = "This person is already a member of the organization"


class LastAdmin(Conflict):
    code = "last_admin"
    default_message = "The organization's last admin can be neither removed nor demoted"


class PasswordRequired(ValidationFailed):
    code = "password_required"
    default_message = "A new account needs an initial password (at least 12 characters)"


def list_members(session: Session, org_id: uuid.UUID) -> list[MemberView]:
    rows = session.execute(
        select(Membership, User)
        .join(User, User.id == Membership.user_id)
        .where(Membership.org_id == org_id)
        .order_by(Membership.created_at, Membership.id)
    ).all()
    return [_view(m, u) for m, u in rows]


def add_member(
    session: Session, org_id: uuid.UUID, body: AddMember, actor: uuid.UUID | None, request_id: str
) -> MemberView:
    user = session.scalars(select(User).where(func.lower(User.email) == str(body.email).lower())).one_or_none()
    created = user is None
    if user is None:
        if body.password is None:
            raise PasswordRequired()
        user = User(email=str(body.email), display_name=body.display_name, password_hash=hash_password(body.password))
        session.add(user)
        session.flush()
    elif _membership(session, org_id, user.id) is not None:
        raise AlreadyMember()
    membership = Membership(org_id=org_id, user_id=user.id, role=body.role.value)
    session.add(membership)
    session.flush()
    _audit(session, org_id, "member.added", user, actor, request_id, role=body.role.value, new_account=created)
    session.refresh(membership)
    return _view(membership, user)


def change_role(
    session: Session, org_id: uuid.UUID, user_id: uuid.UUID, role: Role, actor: uuid.UUID | None, request_id: str
) -> MemberView:
    admins = _lock_admins(session, org_id)
    membership, user = _member(session, org_id, user_id)
    before = Role(membership.role)
    if before is role:
        return _view(membership, user)
    if before is Role.ADMIN and len(admins) <= 1:
        raise LastAdmin()
    membership.role = role.value
    revoked = _revoke_tokens(session, org_id, user_id, above=role) if role.rank < before.rank else 0
    _audit(session, org_id, "member.role_changed", user, actor, request_id, **{"from": before.value, "to": role.value})
    session.flush()
    if revoked:
        _audit(session, org_id, "member.tokens_revoked", user, actor, request_id, tokens=revoked)
    return _view(membership, user)


def remove_member(
    session: Session, org_id: uuid.UUID, user_id: uuid.UUID, actor: uuid.UUID | None, request_id: str
) -> None:
    admins = _lock_admins(session, org_id)
    membership, user = _member(session, org_id, user_id)
    if Role(membership.role) is Role.ADMIN and len(admins) <= 1:
        raise LastAdmin()
    session.delete(membership)
    revoked = _revoke_tokens(session, org_id, user_id, above=None)
    _audit(session, org_id, "member.removed", user, actor, request_id, role=membership.role, tokens_revoked=revoked)
    session.flush()


def _member(session: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> tuple[Membership, User]:
    membership = _membership(session, org_id, user_id, for_update=True)
    user = session.get(User, user_id)
    if membership is None or user is None:
        raise NotFound("No such member")
    return membership, user


def _membership(
    session: Session, org_id: uuid.UUID, user_id: uuid.UUID, *, for_update: bool = False
) -> Membership | None:
    query = select(Membership).where(Membership.org_id == org_id, Membership.user_id == user_id)
    return session.scalars(query.with_for_update() if for_update else query).one_or_none()


def _lock_admins(session: Session, org_id: uuid.UUID) -> list[uuid.UUID]:
    """Lock the org's admin memberships, in id order, before any other membership row: two admins
    demoting each other at once serialize here (no deadlock) and the second finds one admin left."""
    return list(
        session.scalars(
            select(Membership.id)
            .where(Membership.org_id == org_id, Membership.role == Role.ADMIN.value)
            .order_by(Membership.id)
            .with_for_update()
        ).all()
    )


def _revoke_tokens(session: Session, org_id: uuid.UUID, user_id: uuid.UUID, *, above: Role | None) -> int:
    """Revoke the person's live tokens in this org: all of them, or those whose role ranks above ``above``."""
    stronger = [r.value for r in Role if above is None or r.rank > above.rank]
    result = session.execute(
        update(ApiToken)
        .where(
            ApiToken.org_id == org_id,
            ApiToken.user_id == user_id,
            ApiToken.revoked_at.is_(None),
            ApiToken.role.in_(stronger),
        )
        .values(revoked_at=datetime.now(UTC))
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def _audit(
    session: Session,
    org_id: uuid.UUID,
    action: str,
    user: User,
    actor: uuid.UUID | None,
    request_id: str,
    **details: object,
) -> None:
    record_audit(
        session,
        org_id=org_id,
        action=action,
        actor_user_id=actor,
        target_type="user",
        target_id=user.id,
        details={"email": user.email, **details},
        request_id=request_id,
    )


def _view(membership: Membership, user: User) -> MemberView:
    return MemberView(
        user_id=user.id,
        email=user.email,
        display_name=user.display_name,
        role=Role(membership.role),
        mfa_enrolled=user.mfa_enabled_at is not None,
        last_login_at=user.last_login_at,
        member_since=membership.created_at,
    )
