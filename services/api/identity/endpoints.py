"""``/api/v1/auth`` and ``/api/v1/tokens``: sign in, prove a second factor, manage API tokens."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta

from fastapi import APIRouter, Request, status

from services.api.core.auth import AdminWrite, Authenticated, Manager
from services.api.core.database import PublicSession, database
from services.api.core.errors import (
    Conflict,
    Forbidden,
    MfaRequired,
    NotFound,
    Unauthorized,
    ValidationFailed,
    error_responses,
)
from services.api.core.responses import Envelope
from services.api.identity import repository, service, throttle
from services.api.identity.schemas import (
    ChangePassword,
    CreateTokenRequest,
    IssuedToken,
    LoginRequest,
    Me,
    TokenView,
    TotpConfirm,
    TotpEnrollment,
)
from services.api.settings import ApiSettings
from switchboard.crypto import KeyRing
from switchboard.db.enums import ApiTokenKind, Role
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

router = APIRouter(prefix="/api/v1", tags=["identity"])


def _keyring(request: Request) -> KeyRing:
    keyring: KeyRing = request.app.state.keyring
    return keyring


def _issued(token: service.NewToken) -> IssuedToken:
    row = token.row
    return IssuedToken(
        id=row.id,
        token=token.plaintext,
        token_prefix=row.token_prefix,
        org_id=row.org_id,
        role=Role(row.role),
        kind=ApiTokenKind(row.kind),
        mfa_verified=row.mfa_verified,
        expires_at=row.expires_at,
    )


@router.post(
    "/auth/login",
    response_model=Envelope[IssuedToken],
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(Unauthorized, ValidationFailed, throttle.TooManyAttempts),
)
async def login(body: LoginRequest, session: PublicSession, request: Request) -> Envelope[IssuedToken]:
    """Sign in; the session may perform admin writes only if a valid ``totp_code`` was given.

    Throttled (``throttle.py``): after too many failures for the email or from the address,
    ``429 login_rate_limited`` with ``Retry-After``, whatever the password."""
    keyring = _keyring(request)
    email = str(body.email)
    address = request.client.host if request.client else "unknown"
    settings: ApiSettings = request.app.state.settings
    limits = throttle.Limits(
        per_email=settings.login_failures_per_email,
        per_address=settings.login_failures_per_address,
        window=timedelta(seconds=settings.login_failure_window_s),
    )
    sessions = database(request).sessions
    attempt = await throttle.begin_attempt(sessions, email, address, limits)  # counted before it is checked
    try:
        token = await session.run_sync(
            lambda s: service.login(
                s, keyring, email=email, password=body.password, totp_code=body.totp_code, org_id=body.org_id
            )
        )
    except Unauthorized:
        log.info("sign-in refused", extra={"client_address": address})  # its row stays: the failure
        raise
    except BaseException:
        with contextlib.suppress(Exception):  # the original error is the one to answer
            await throttle.forget_attempt(sessions, attempt)
        raise
    await throttle.clear(session, email)
    return Envelope(data=_issued(token))


@router.get("/auth/me", response_model=Envelope[Me], responses=error_responses(Unauthorized))
async def me(ctx: Authenticated) -> Envelope[Me]:
    p = ctx.principal
    enrolled = False
    if p.user_id is not None:
        user = await ctx.session.run_sync(lambda s: repository.user_by_id(s, p.user_id))  # type: ignore[arg-type]
        enrolled = user is not None and user.mfa_enabled_at is not None
    return Envelope(
        data=Me(
            org_id=p.org_id,
            user_id=p.user_id,
            role=p.role,
            token_kind=p.kind,
            mfa_verified=p.mfa_verified,
            mfa_enrolled=enrolled,
        )
    )


@router.post("/auth/logout", status_code=status.HTTP_204_NO_CONTENT, responses=error_responses(Unauthorized))
async def logout(ctx: Authenticated) -> None:
    """Revoke the calling token at once (any role, any kind): a person who suspects their session
    token leaked ends it without an admin; the token is refused from this commit on."""
    await ctx.session.run_sync(
        lambda s: service.revoke_api_token(
            s,
            org_id=ctx.org_id,
            token_id=ctx.principal.token_id,
            actor_user_id=ctx.principal.user_id,
            request_id=ctx.request_id,
        )
    )


class SessionRequired(Forbidden):
    code = "session_required"
    default_message = "Sign in (POST /api/v1/auth/login) to manage your own second factor"


def _require_user(ctx: Authenticated) -> uuid.UUID:
    if ctx.principal.user_id is None:
        raise Forbidden("Only a user's token can manage that user's second factor")
    return ctx.principal.user_id


def _require_signed_in_user(ctx: Authenticated) -> uuid.UUID:
    """The person behind a login session (or the bootstrap token, MFA-verified by construction: the
    operator's own first credential). An automation token carries its creator's user id, but
    whoever holds it (a CI job, a viewer's script) is not that person: enrolling a second factor
    with it would give the holder the creator's TOTP secret. Automation tokens are never
    MFA-verified (services/api/identity/service.py), so that is what tells them apart."""
    principal = ctx.principal
    if principal.kind is not ApiTokenKind.SESSION and not principal.mfa_verified:
        raise SessionRequired()
    return _require_user(ctx)


@router.post(
    "/auth/password",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(Unauthorized, Forbidden, ValidationFailed),
)
async def change_password(body: ChangePassword, ctx: Authenticated) -> None:
    """Change the calling user's password (the current one proves it is them); their other
    sessions stay valid until they expire or are revoked."""
    user_id = _require_user(ctx)
    await ctx.session.run_sync(
        lambda s: service.change_password(
            s, org_id=ctx.org_id, user_id=user_id, current=body.current_password, new=body.new_password
        )
    )


@router.post(
    "/auth/mfa/totp",
    response_model=Envelope[TotpEnrollment],
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(Unauthorized, Forbidden, Conflict),
)
async def start_totp(ctx: Authenticated, request: Request) -> Envelope[TotpEnrollment]:
    """Begin TOTP enrollment for the calling user."""
    user_id = _require_signed_in_user(ctx)
    keyring = _keyring(request)
    secret, uri = await ctx.session.run_sync(lambda s: service.start_totp_enrollment(s, keyring, user_id=user_id))
    return Envelope(data=TotpEnrollment(secret=secret, otpauth_uri=uri))


@router.post(
    "/auth/mfa/totp:confirm",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(Unauthorized, Forbidden, Conflict, ValidationFailed),
)
async def confirm_totp(body: TotpConfirm, ctx: Authenticated, request: Request) -> None:
    """Finish enrollment with a code from the authenticator; later logins can then prove MFA."""
    user_id = _require_signed_in_user(ctx)
    keyring = _keyring(request)
    await ctx.session.run_sync(
        lambda s: service.confirm_totp_enrollment(s, keyring, user_id=user_id, org_id=ctx.org_id, code=body.code)
    )


@router.get("/tokens", response_model=Envelope[list[TokenView]], responses=error_responses(Unauthorized, Forbidden))
async def list_tokens(ctx: Manager) -> Envelope[list[TokenView]]:
    rows = await ctx.session.run_sync(lambda s: repository.tokens(s, ctx.org_id))
    return Envelope(data=[TokenView.model_validate(r, from_attributes=True) for r in rows])


@router.post(
    "/tokens",
    response_model=Envelope[IssuedToken],
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, ValidationFailed),
)
async def create_token(body: CreateTokenRequest, ctx: AdminWrite) -> Envelope[IssuedToken]:
    """Mint an automation token (shown once). It is never MFA-verified, so it cannot do admin writes."""
    p = ctx.principal
    token = await ctx.session.run_sync(
        lambda s: service.create_api_token(
            s,
            org_id=p.org_id,
            actor_user_id=p.user_id,
            actor_role=p.role,
            name=body.name,
            role=body.role,
            expires_in_days=body.expires_in_days,
            request_id=ctx.request_id,
        )
    )
    return Envelope(data=_issued(token))


@router.delete(
    "/tokens/{token_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound),
)
async def revoke_token(token_id: uuid.UUID, ctx: AdminWrite) -> None:
    await ctx.session.run_sync(
        lambda s: service.revoke_api_token(
            s, org_id=ctx.org_id, token_id=token_id, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
