"""``/api/v1/insights``: what the analyses found (viewer) and the owner's steps on them (manager):
``:seen``, ``:dismiss`` and ``:action`` (the Home card's "approve")."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request

from services.api.analysis import service
from services.api.analysis.schemas import InsightAction, InsightView
from services.api.core.auth import Manager, Viewer
from services.api.core.errors import Conflict, Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from switchboard.contracts import Serde

router = APIRouter(prefix="/api/v1", tags=["insights"])

_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed)
_STEP_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, Conflict, ValidationFailed)


@router.get("/insights", response_model=Page[InsightView], responses=_ERRORS)
async def list_insights(
    ctx: Viewer,
    status: Annotated[str | None, Query(max_length=16, description="new, seen, dismissed or actioned")] = None,
    area: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> Page[InsightView]:
    """Newest first (created_at desc, id desc)."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: service.list_insights(s, ctx.org_id, status=status, area=area, limit=limit + 1, before=before)
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[service.view(r) for r in page], next_cursor=next_cursor)


@router.post("/insights/{insight_id}:dismiss", response_model=Envelope[InsightView], responses=_STEP_ERRORS)
async def dismiss_insight(insight_id: uuid.UUID, ctx: Manager, request: Request) -> Envelope[InsightView]:
    """Dismiss an insight (idempotent); re-running the analysis keeps it dismissed. 409 once actioned."""
    serde: Serde = request.app.state.serde
    view = await ctx.session.run_sync(
        lambda s: service.dismiss(s, serde, ctx.org_id, insight_id, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)


@router.post("/insights/{insight_id}:seen", response_model=Envelope[InsightView], responses=_STEP_ERRORS)
async def mark_insight_seen(insight_id: uuid.UUID, ctx: Manager, request: Request) -> Envelope[InsightView]:
    """``new`` → ``seen`` (idempotent); it stays on the to-do list until dismissed or actioned."""
    serde: Serde = request.app.state.serde
    view = await ctx.session.run_sync(
        lambda s: service.mark_seen(s, serde, ctx.org_id, insight_id, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)


@router.post("/insights/{insight_id}:action", response_model=Envelope[InsightView], responses=_STEP_ERRORS)
async def action_insight(
    insight_id: uuid.UUID, ctx: Manager, request: Request, body: InsightAction | None = None
) -> Envelope[InsightView]:
    """The owner acted on it (the Home card's "approve"; idempotent): ``actioned``, off the to-do list.

    ``action_type`` names the suggested action taken (recorded in the audit log). An insight
    backed by a proposed action is answered through its decision (409 ``insight_decided_by_approval``).
    """
    serde: Serde = request.app.state.serde
    action_type = body.action_type if body is not None else None
    view = await ctx.session.run_sync(
        lambda s: service.mark_actioned(
            s, serde, ctx.org_id, insight_id, action_type, ctx.principal.user_id, ctx.request_id
        )
    )
    return Envelope(data=view)
