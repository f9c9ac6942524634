"""Helpers for API tests: an organization with tokens of every role, and an HTTP client."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from services.api.identity.service import bootstrap_organization, mint_token
from switchboard.db.enums import ApiTokenKind, Role
from switchboard.db.session import create_engine, set_tenant


@dataclass
class OrgHandle:
    """An org created for one test, with its admin and a token per (role, mfa) on demand."""

    org_id: uuid.UUID
    admin_user_id: uuid.UUID
    admin_token: str  # admin, MFA-verified (the bootstrap token)
    database_url: str
    _tokens: dict[tuple[Role, bool], str] = field(default_factory=dict)

    def token(self, role: Role = Role.ADMIN, *, mfa: bool = True) -> str:
        """A bearer token with ``role``; ``mfa`` says whether it proves a second factor."""
        if (role, mfa) == (Role.ADMIN, True):
            return self.admin_token
        if (role, mfa) not in self._tokens:
            engine = create_engine(self.database_url, pool_size=1)
            try:
                with Session(engine) as session, session.begin():
                    set_tenant(session, self.org_id)
                    minted = mint_token(
                        session,
                        org_id=self.org_id,
                        name=f"test {role.value} mfa={mfa}",
                        role=role,
                        kind=ApiTokenKind.SESSION,
                        mfa_verified=mfa,
                        user_id=self.admin_user_id,
                        created_by=self.admin_user_id,
                        expires_at=datetime.now(UTC) + timedelta(hours=1),
                    )
                    self._tokens[(role, mfa)] = minted.plaintext
            finally:
                engine.dispose()
        return self._tokens[(role, mfa)]

    def headers(self, role: Role = Role.ADMIN, *, mfa: bool = True) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role, mfa=mfa)}"}


def create_org(
    database_url: str, *, name: str = "Test Org", password: str | None = None, email: str | None = None
) -> OrgHandle:
    """Bootstrap a fresh organization through the same code path as ``switchboard admin bootstrap``."""
    engine = create_engine(database_url, pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            org_id, user_id, token = bootstrap_organization(
                session,
                org_name=name,
                email=email or f"admin-{uuid.uuid4().hex[:10]}@example.com",
                password=password,
            )
    finally:
        engine.dispose()
    return OrgHandle(org_id=org_id, admin_user_id=user_id, admin_token=token, database_url=database_url)
