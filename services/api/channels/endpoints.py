"""``/api/v1/channel-sessions``: connect WhatsApp numbers (WAHA sessions) and manage their webhook secret."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from services.api.channels import repository, service
from services.api.channels.schemas import (
    WEBHOOK_PATH,
    ChannelSessionCreated,
    ChannelSessionView,
    CreateChannelSession,
    UpdateChannelSession,
    WebhookSetup,
)
from services.api.core.auth import AdminWrite, Manager
from services.api.core.errors import (
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
from switchboard.db.models.channels import ChannelSession

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
) -> Page[ChannelSessionView]:
    after = decode_cursor(cursor)
    rows = await ctx.session.run_sync(lambda s: repository.page(s, ctx.org_id, limit=limit + 1, after=after))
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
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, ValidationFailed),
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
