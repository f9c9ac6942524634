"""``/api/v1/channel-sessions``: connect WhatsApp numbers (WAHA sessions) and manage their webhook secret."""

from __future__ import annotations

import uuid
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Request, status
from sqlalchemy import update

from services.api.channels import repository, service, waha_admin
from services.api.channels.schemas import (
    WEBHOOK_PATH,
    ChannelConnected,
    ChannelDisconnected,
    ChannelQrCode,
    ChannelSessionCreated,
    ChannelSessionView,
    CreateChannelSession,
    UpdateChannelSession,
    WebhookSetup,
)
from services.api.core.auth import AdminWrite, Manager
from services.api.core.errors import (
    ApiError,
    Conflict,
    Forbidden,
    MfaRequired,
    NotFound,
    Unauthorized,
    ValidationFailed,
    error_responses,
)
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from switchboard.crypto import KeyRing
from switchboard.db.audit import record_audit
from switchboard.db.enums import ChannelSessionStatus
from switchboard.db.lookups import lookup_session_name_on_server
from switchboard.db.models.channels import ChannelSession
from switchboard.db.session import async_tenant_transaction
from switchboard.egress import EgressPolicy
from switchboard.server_urls import canonical_server_url

router = APIRouter(prefix="/api/v1", tags=["channel sessions"])


def _keyring(request: Request) -> KeyRing:
    keyring: KeyRing = request.app.state.keyring
    return keyring


def _view(row: ChannelSession) -> ChannelSessionView:
    return ChannelSessionView(
        id=row.id,
        provider=row.provider,  # type: ignore[arg-type]
        external_session=row.external_session,
        label=row.label,
        phone_number=row.phone_number,
        status=row.status,  # type: ignore[arg-type]
        base_url=row.base_url,
        owner_replies_take_over=row.owner_replies_take_over,
        has_webhook_secret=row.webhook_secret_ciphertext is not None,
        has_api_key=row.api_key_ciphertext is not None,
        webhook_secret_rotated_at=row.webhook_secret_rotated_at,
        archived_at=row.archived_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _created(issued: service.IssuedSecret) -> ChannelSessionCreated:
    row = issued.row
    webhook = WebhookSetup(
        path=f"{WEBHOOK_PATH}/{row.id}", name_routed_path=WEBHOOK_PATH if row.routes_by_name else None
    )
    return ChannelSessionCreated(**_view(row).model_dump(), webhook_secret=issued.webhook_secret, webhook=webhook)


@router.post(
    "/channel-sessions",
    response_model=Envelope[ChannelSessionCreated],
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, Conflict, ValidationFailed),
)
async def create_channel_session(
    body: CreateChannelSession, ctx: AdminWrite, request: Request
) -> Envelope[ChannelSessionCreated]:
    """Register a WAHA session; the response holds its webhook secret, shown this once."""
    keyring = _keyring(request)
    api_key = body.api_key.get_secret_value() if body.api_key is not None else None
    issued = await ctx.session.run_sync(
        lambda s: service.create_session(
            s,
            keyring,
            org_id=ctx.org_id,
            actor_user_id=ctx.principal.user_id,
            label=body.label,
            external_session=body.external_session,
            phone_number=body.phone_number,
            base_url=body.base_url,
            api_key=api_key,
            owner_replies_take_over=body.owner_replies_take_over,
            request_id=ctx.request_id,
        )
    )
    return Envelope(data=_created(issued))


@router.get(
    "/channel-sessions",
    response_model=Page[ChannelSessionView],
    responses=error_responses(Unauthorized, Forbidden, ValidationFailed),
)
async def list_channel_sessions(
    ctx: Manager,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    archived: Annotated[bool, Query(description="true: the archived sessions instead of the live ones")] = False,
) -> Page[ChannelSessionView]:
    """The org's sessions, oldest first: the live ones, or (``archived=true``) the archived ones."""
    after = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: repository.page(s, ctx.org_id, limit=limit + 1, after=after, archived=archived)
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[_view(r) for r in page], next_cursor=next_cursor)


@router.get(
    "/channel-sessions/{session_id}",
    response_model=Envelope[ChannelSessionView],
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed),
)
async def get_channel_session(session_id: uuid.UUID, ctx: Manager) -> Envelope[ChannelSessionView]:
    row = await ctx.session.run_sync(lambda s: repository.by_id(s, ctx.org_id, session_id))
    if row is None:
        raise NotFound("No such channel session")
    return Envelope(data=_view(row))


@router.patch(
    "/channel-sessions/{session_id}",
    response_model=Envelope[ChannelSessionView],
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed),
)
async def update_channel_session(
    session_id: uuid.UUID, body: UpdateChannelSession, ctx: AdminWrite, request: Request
) -> Envelope[ChannelSessionView]:
    """Change only the properties sent: label, number, WAHA server, API key, phone takeover (`api_key: null` clears)."""
    keyring = _keyring(request)
    changes: dict[str, object] = {}
    for name in body.model_fields_set:
        value = getattr(body, name)
        changes[name] = value.get_secret_value() if name == "api_key" and value is not None else value
    row = await ctx.session.run_sync(
        lambda s: service.update_session(
            s,
            keyring,
            org_id=ctx.org_id,
            session_id=session_id,
            actor_user_id=ctx.principal.user_id,
            changes=changes,
            request_id=ctx.request_id,
        )
    )
    return Envelope(data=_view(row))


@router.post(
    "/channel-sessions/{session_id}:rotate-secret",
    response_model=Envelope[ChannelSessionCreated],
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed),
)
async def rotate_webhook_secret(
    session_id: uuid.UUID, ctx: AdminWrite, request: Request
) -> Envelope[ChannelSessionCreated]:
    """Issue a new webhook secret (shown once); the old one stops validating when this commits."""
    keyring = _keyring(request)
    issued = await ctx.session.run_sync(
        lambda s: service.rotate_webhook_secret(
            s,
            keyring,
            org_id=ctx.org_id,
            session_id=session_id,
            actor_user_id=ctx.principal.user_id,
            request_id=ctx.request_id,
        )
    )
    return Envelope(data=_created(issued))


# --------------------------------------------------------------------------- connecting through WAHA


class PublicUrlNotSet(Conflict):
    code = "public_url_not_set"
    default_message = "API_PUBLIC_URL is not set: there is no webhook URL to give WAHA"


class ChannelUnavailable(ApiError):
    """WAHA could not be reached or refused the call; ``details.reason`` says which, ``details.status`` WAHA's."""

    status_code = 502
    code = "channel_unavailable"
    default_message = "The session's WAHA server did not do what was asked"


class ChannelBaseUrlRefused(ValidationFailed):
    code = "channel_base_url_refused"


class ChannelNotScanning(Conflict):
    code = "channel_not_waiting_for_qr"
    default_message = "The session is not waiting for a QR code scan"


def _waha_error(exc: waha_admin.WahaError) -> ApiError:
    if exc.code == "channel_base_url_refused":
        return ChannelBaseUrlRefused(exc.message, details={"field": "base_url"})
    if exc.code == "channel_not_scanning":
        return ChannelNotScanning()
    return ChannelUnavailable(exc.message, details={"reason": exc.code, "status": exc.status})


async def _waha_session(
    session_id: uuid.UUID, ctx: AdminWrite, request: Request
) -> tuple[ChannelSessionView, waha_admin.WahaSession, str | None]:
    """The session as the API shows it, where it lives on WAHA, and its webhook secret; then the
    request's own transaction ends, so the calls to WAHA (seconds, at worst) hold no pooled
    connection. (Everything is read before the commit: the row expires with it.)"""
    row = await ctx.session.run_sync(lambda s: service.live_session(s, ctx.org_id, session_id))
    keyring = _keyring(request)
    settings = request.app.state.settings
    if row.base_url is not None and _origin(row.base_url) == _origin(settings.waha_base_url):
        # Session names are unique per server as written: the platform's WAHA under its own URL
        # would let this session name another org's session there (and rewrite its webhook).
        platform = row.provider
        taken = await ctx.session.run_sync(
            lambda s: lookup_session_name_on_server(s, platform, "", row.external_session)
        )
        if taken:
            raise ChannelBaseUrlRefused(
                "base_url names the platform's WAHA, where another session has this name",
                details={"field": "base_url"},
            )
    secret = service.open_webhook_secret(keyring, row)
    platform_key = settings.waha_api_key.get_secret_value() if settings.waha_api_key is not None else None
    target = waha_admin.WahaSession(
        base_url=row.base_url or settings.waha_base_url,
        name=row.external_session,
        # The platform's WAHA is the operator's: its key, when set, not one a tenant stored.
        api_key=(platform_key if row.base_url is None and platform_key else service.open_api_key(keyring, row)),
    )
    view = _view(row)
    await ctx.session.commit()
    return view, target, None if secret is None else secret.decode()


async def _archived_view(request: Request, ctx: AdminWrite, session_id: uuid.UUID) -> ChannelSessionView:
    async with request.app.state.database.sessions() as session, async_tenant_transaction(session, ctx.org_id):
        row = await session.run_sync(lambda s: repository.by_id(s, ctx.org_id, session_id))
        assert row is not None  # archived rows are never deleted
        return _view(row)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(canonical_server_url(url))  # the setting as the operator typed it, too
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


async def _record_waha_call(
    request: Request,
    ctx: AdminWrite,
    session_id: uuid.UUID,
    action: str,
    details: dict[str, str],
    *,
    status: ChannelSessionStatus | None = None,
) -> None:
    """After WAHA answered (the request's own transaction ended before the call): the audit entry,
    and the session's new status when the call set one."""
    async with request.app.state.database.sessions() as session, async_tenant_transaction(session, ctx.org_id):
        if status is not None:
            await session.execute(
                update(ChannelSession)
                .where(ChannelSession.org_id == ctx.org_id, ChannelSession.id == session_id)
                .values(status=status.value)
            )
        await session.run_sync(
            lambda s: record_audit(
                s,
                org_id=ctx.org_id,
                action=action,
                actor_user_id=ctx.principal.user_id,
                target_type="channel_session",
                target_id=session_id,
                details=details,
                request_id=ctx.request_id,
            )
        )


def _egress(request: Request) -> EgressPolicy:
    settings = request.app.state.settings
    return settings.egress.policy(trusted_urls=(settings.waha_base_url,))


@router.post(
    "/channel-sessions/{session_id}:connect",
    response_model=Envelope[ChannelConnected],
    responses=error_responses(
        Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed, ChannelUnavailable
    ),
)
async def connect_channel_session(
    session_id: uuid.UUID, ctx: AdminWrite, request: Request
) -> Envelope[ChannelConnected]:
    """Configure the WAHA session to send its events to this session's webhook (signed with its
    secret) and start it — what an operator used to do by hand in WAHA; audited."""
    view, target, secret = await _waha_session(session_id, ctx, request)
    public_url: str = request.app.state.settings.public_url.rstrip("/")
    if not public_url:
        raise PublicUrlNotSet()
    if secret is None:
        raise Conflict("The session has no webhook secret: rotate it first", details={"field": "webhook_secret"})
    webhook_url = f"{public_url}{WEBHOOK_PATH}/{view.id}"
    try:
        waha_status = await waha_admin.connect(target, waha_admin.webhook_config(webhook_url, secret), _egress(request))
    except waha_admin.WahaError as exc:
        raise _waha_error(exc) from None
    details = {"webhook_url": webhook_url, "waha_status": waha_status}
    await _record_waha_call(request, ctx, view.id, "channel_session.connected", details)
    return Envelope(data=ChannelConnected(session=view, waha_status=waha_status, webhook_url=webhook_url))


@router.post(
    "/channel-sessions/{session_id}:disconnect",
    response_model=Envelope[ChannelDisconnected],
    responses=error_responses(
        Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed, ChannelUnavailable
    ),
)
async def disconnect_channel_session(
    session_id: uuid.UUID, ctx: AdminWrite, request: Request
) -> Envelope[ChannelDisconnected]:
    """Unlink the business's phone and stop the WAHA session (a lost phone, a number given up, a
    business leaving): until now only an operator in WAHA's dashboard could. The session becomes
    ``stopped``; ``:connect`` and a QR scan link it again. Audited."""
    view, target, _ = await _waha_session(session_id, ctx, request)
    try:
        waha_status = await waha_admin.disconnect(target, _egress(request))
    except waha_admin.WahaError as exc:
        raise _waha_error(exc) from None
    stopped_status = ChannelSessionStatus.STOPPED
    details = {"waha_status": waha_status}
    await _record_waha_call(request, ctx, view.id, "channel_session.disconnected", details, status=stopped_status)
    stopped = view.model_copy(update={"status": stopped_status})
    return Envelope(data=ChannelDisconnected(session=stopped, waha_status=waha_status))


@router.post(
    "/channel-sessions/{session_id}:archive",
    response_model=Envelope[ChannelSessionView],
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, ValidationFailed, ChannelUnavailable),
)
async def archive_channel_session(
    session_id: uuid.UUID, ctx: AdminWrite, request: Request
) -> Envelope[ChannelSessionView]:
    """Archive a number given up: WAHA logs the phone out and stops the session first (as
    ``:disconnect``; the same ``502`` when it cannot), since archiving frees the session's name on
    its server and a login left behind would pass to whoever takes the name. It is kept for the
    conversations that name it, readable here and with ``?archived=true``; it routes no webhook,
    sends nothing, its conversations' scheduled follow-ups are cancelled, and it can no longer
    be changed or connected. Audited; archiving twice changes nothing."""
    current = await ctx.session.run_sync(lambda s: repository.by_id(s, ctx.org_id, session_id))
    if current is None:
        raise NotFound("No such channel session")
    if current.archived_at is not None:
        return Envelope(data=_view(current))
    try:
        _, target, _ = await _waha_session(session_id, ctx, request)
    except service.ChannelSessionArchived:  # another archive of it committed in between
        return Envelope(data=await _archived_view(request, ctx, session_id))
    try:
        waha_status = await waha_admin.disconnect(target, _egress(request))
    except waha_admin.WahaError as exc:
        raise _waha_error(exc) from None
    async with request.app.state.database.sessions() as session, async_tenant_transaction(session, ctx.org_id):
        row = await session.run_sync(
            lambda s: service.archive_session(
                s,
                org_id=ctx.org_id,
                session_id=session_id,
                actor_user_id=ctx.principal.user_id,
                waha_status=waha_status,
                request_id=ctx.request_id,
            )
        )
        view = _view(row)
    return Envelope(data=view)


@router.get(
    "/channel-sessions/{session_id}/qr",
    response_model=Envelope[ChannelQrCode],
    responses=error_responses(
        Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed, ChannelUnavailable
    ),
)
async def channel_session_qr(session_id: uuid.UUID, ctx: AdminWrite, request: Request) -> Envelope[ChannelQrCode]:
    """The QR code WAHA shows for linking the business's phone (while the session is ``scan_qr``):
    linking a phone takes over the number, so it needs an admin with a second factor, and each
    code handed out is audited (``channel_session.qr_shown``: who could have linked a phone, when)."""
    view, target, _ = await _waha_session(session_id, ctx, request)
    try:
        code = await waha_admin.qr_code(target, _egress(request))
    except waha_admin.WahaError as exc:
        raise _waha_error(exc) from None
    await _record_waha_call(request, ctx, view.id, "channel_session.qr_shown", {"mimetype": code["mimetype"]})
    return Envelope(data=ChannelQrCode(**code))
