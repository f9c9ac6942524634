"""``GET /api/v1/audit``: who did what, newest first; entries never hold a secret."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.api.audit import repository
from services.api.audit.schemas import AuditEntryView
from services.api.core.auth import Manager
from services.api.core.errors import Forbidden, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Page

router = APIRouter(prefix="/api/v1", tags=["audit"])


@router.get(
    "/audit", response_model=Page[AuditEntryView], responses=error_responses(Unauthorized, Forbidden, ValidationFailed)
)
async def list_audit(
    ctx: Manager,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    action: Annotated[str | None, Query(max_length=100, description="e.g. `ai_agent` or `ai_agent.published`")] = None,
    target_type: Annotated[str | None, Query(max_length=100)] = None,
    target_id: Annotated[str | None, Query(max_length=100)] = None,
) -> Page[AuditEntryView]:
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: repository.entries(
            s, ctx.org_id, limit=limit + 1, before=before, action=action, target_type=target_type, target_id=target_id
        )
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[AuditEntryView.model_validate(r, from_attributes=True) for r in page], next_cursor=next_cursor)
