"""All SQL of the identity domain (sync Session; the API calls it through ``run_sync``)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from switchboard.db.models.tenancy import ApiToken, Membership, Organization, User


def user_by_email(session: Session, email: str) -> User | None:
    return session.scalars(select(User).where(func.lower(User.email) == email.lower())).one_or_none()


def user_by_id(session: Session, user_id: uuid.UUID) -> User | None:
    return session.get(User, user_id)


def organization(session: Session, org_id: uuid.UUID) -> Organization | None:
    return session.scalars(select(Organization).where(Organization.id == org_id)).one_or_none()


def membership(session: Session, org_id: uuid.UUID, user_id: uuid.UUID) -> Membership | None:
    return session.scalars(
        select(Membership).where(Membership.org_id == org_id, Membership.user_id == user_id)
    ).one_or_none()


def tokens(session: Session, org_id: uuid.UUID) -> list[ApiToken]:
    return list(
        session.scalars(
            select(ApiToken)
            .where(ApiToken.org_id == org_id, ApiToken.revoked_at.is_(None))
            .order_by(ApiToken.created_at)
        )
    )


def token(session: Session, org_id: uuid.UUID, token_id: uuid.UUID) -> ApiToken | None:
    return session.scalars(select(ApiToken).where(ApiToken.org_id == org_id, ApiToken.id == token_id)).one_or_none()


def revoke_token(session: Session, org_id: uuid.UUID, token_id: uuid.UUID, at: datetime) -> bool:
    result = session.execute(
        update(ApiToken)
        .where(ApiToken.org_id == org_id, ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=at)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
