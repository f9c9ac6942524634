"""Who is calling, for which organization, with which role — and the guards endpoints use.

``Authorization: Bearer <token>`` is hashed and looked up through the narrow
``lookup_api_token`` function (the org is unknown until the token is). The same
transaction then sets ``app.org_id`` so every query of the request is confined
to that organization by row-level security; repositories filter by org too.

Endpoints declare what they need with the ``Annotated`` aliases at the bottom:
``Viewer``, ``Manager``, ``Admin`` (role only) and ``AdminWrite`` (admin role and
a session proven with a second factor [004 §7], else 403 ``mfa_required``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from services.api.core.database import Database, database
from services.api.core.errors import Forbidden, MfaRequired, Unauthorized
from switchboard.db.enums import ApiTokenKind, Role
from switchboard.db.lookups import ApiTokenIdentity, hash_api_token, lookup_api_token
from switchboard.db.session import async_set_tenant

# ``api_tokens.last_used_at`` is what tells an admin which tokens are still in use before revoking
# one; minute precision is enough, so each process writes it at most once a minute per token.
LAST_USED_PRECISION_S = 60.0
_TOUCH_TOKEN = text("UPDATE api_tokens SET last_used_at = now() WHERE org_id = :org_id AND id = :token_id")
_touched: dict[uuid.UUID, float] = {}
_TOUCHED_MAX = 10_000


def _touch_due(identity: ApiTokenIdentity) -> bool:
    return time.monotonic() - _touched.get(identity.token_id, -LAST_USED_PRECISION_S) >= LAST_USED_PRECISION_S


async def _touch_token(db: Database, identity: ApiTokenIdentity) -> None:
    """``last_used_at`` in a transaction of its own, after the request's committed: the token's
    row is never locked for the length of a request."""
    async with db.sessions() as session, session.begin():
        await async_set_tenant(session, identity.org_id)
        await session.execute(_TOUCH_TOKEN, {"org_id": identity.org_id, "token_id": identity.token_id})
    if len(_touched) >= _TOUCHED_MAX:
        _touched.clear()  # a bound, not a cache worth keeping: at worst one more write per token
    _touched[identity.token_id] = time.monotonic()


bearer_scheme = HTTPBearer(auto_error=False, description="An API or session token: `Authorization: Bearer sbt_...`")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    org_id: uuid.UUID
    user_id: uuid.UUID | None
    token_id: uuid.UUID
    role: Role
    kind: ApiTokenKind
    mfa_verified: bool

    def has_role(self, minimum: Role) -> bool:
        return self.role.rank >= minimum.rank


@dataclass(frozen=True)
class RequestContext:
    """What an authenticated endpoint works with: the caller and its org-scoped session."""

    principal: Principal
    session: AsyncSession
    request_id: str

    @property
    def org_id(self) -> uuid.UUID:
        return self.principal.org_id


def _principal(identity: ApiTokenIdentity) -> Principal:
    return Principal(
        org_id=identity.org_id,
        user_id=identity.user_id,
        token_id=identity.token_id,
        role=identity.role,
        kind=identity.kind,
        mfa_verified=identity.mfa_verified,
    )


async def request_context(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    db: Annotated[Database, Depends(database)],
) -> AsyncIterator[RequestContext]:
    """Authenticate, open the org-scoped transaction, commit after the endpoint (rollback on error)."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise Unauthorized()
    token_hash = hash_api_token(credentials.credentials)
    async with db.sessions() as session, session.begin():
        identity = await session.run_sync(lambda sync: lookup_api_token(sync, token_hash))
        if identity is None:
            raise Unauthorized("The token is unknown, expired or revoked")
        await async_set_tenant(session, identity.org_id)
        request.state.org_id = identity.org_id
        yield RequestContext(
            principal=_principal(identity), session=session, request_id=getattr(request.state, "request_id", "")
        )
    if _touch_due(identity):
        await _touch_token(db, identity)


def require(minimum: Role, *, mfa: bool = False) -> Callable[..., Awaitable[RequestContext]]:
    """A dependency that passes the context on only for ``minimum`` role (and MFA if asked)."""

    async def guard(ctx: Annotated[RequestContext, Depends(request_context, scope="function")]) -> RequestContext:
        if not ctx.principal.has_role(minimum):
            raise Forbidden(f"This needs the {minimum.value} role")
        if mfa and not ctx.principal.mfa_verified:
            raise MfaRequired()
        return ctx

    guard.__name__ = f"require_{minimum.value}{'_mfa' if mfa else ''}"
    return guard


Authenticated = Annotated[RequestContext, Depends(request_context, scope="function")]
Viewer = Annotated[RequestContext, Depends(require(Role.VIEWER))]
Manager = Annotated[RequestContext, Depends(require(Role.MANAGER))]
Admin = Annotated[RequestContext, Depends(require(Role.ADMIN))]
AdminWrite = Annotated[RequestContext, Depends(require(Role.ADMIN, mfa=True))]
