"""``/api/v1/followups``: the callbacks agents promised, and the owner taking one back (manager)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from services.api.core.auth import Manager
from services.api.core.errors import Conflict, Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from services.api.followups import service
from services.api.followups.schemas import FollowupView

router = APIRouter(prefix="/api/v1", tags=["follow-ups"])

_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, Conflict, ValidationFailed)


@router.get("/followups", response_model=Page[FollowupView], responses=_ERRORS)
async def list_followups(
    ctx: Manager,
    status: Annotated[str | None, Query(max_length=16, description="scheduled, fired, cancelled or failed")] = None,
    conversation_id: uuid.UUID | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> Page[FollowupView]:
    """Newest first; ``status=scheduled`` lists what is still promised."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: service.list_followups(
            s, ctx.org_id, status=status, conversation_id=conversation_id, limit=limit + 1, before=before
        )
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[FollowupView.model_validate(r) for r in page], next_cursor=next_cursor)


@router.post("/followups/{followup_id}:cancel", response_model=Envelope[FollowupView], responses=_ERRORS)
async def cancel_followup(followup_id: uuid.UUID, ctx: Manager) -> Envelope[FollowupView]:
    """Take a promised callback back (idempotent); ``409 followup_not_scheduled`` once it fired or failed."""
    view = await ctx.session.run_sync(
        lambda s: service.cancel(s, ctx.org_id, followup_id, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)
