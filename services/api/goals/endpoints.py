"""``GET /api/v1/goals`` (viewer) and ``POST /api/v1/goals/{id}:stop`` (manager)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from services.api.core.auth import Manager, RequestContext, Viewer
from services.api.core.errors import Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from services.api.goals import service
from services.api.goals.schemas import GoalView
from switchboard.db.models.slash import GoalStatus

router = APIRouter(prefix="/api/v1", tags=["goals"])


def _user(ctx: RequestContext) -> uuid.UUID | None:
    return ctx.principal.user_id


@router.get(
    "/goals", response_model=Page[GoalView], responses=error_responses(Unauthorized, Forbidden, ValidationFailed)
)
async def list_goals(
    ctx: Viewer,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    status: GoalStatus | None = None,
    conversation_id: uuid.UUID | None = None,
) -> Page[GoalView]:
    """The org's ``/goal`` and ``/loop`` work, newest first: ``status=active`` is what is running
    now, with what each may still spend."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: service.goals(
            s, ctx.org_id, limit=limit + 1, before=before, status=status, conversation_id=conversation_id
        )
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[GoalView.model_validate(r) for r in page], next_cursor=next_cursor)


@router.post(
    "/goals/{goal_id}:stop",
    response_model=Envelope[GoalView],
    responses=error_responses(Unauthorized, Forbidden, NotFound, service.GoalNotActive),
)
async def stop_goal(ctx: Manager, goal_id: uuid.UUID) -> Envelope[GoalView]:
    """Stop an active goal: the segment in flight finishes within its own budget, no next one starts."""
    data = await ctx.session.run_sync(lambda s: service.stop(s, ctx.org_id, goal_id, _user(ctx), ctx.request_id))
    return Envelope(data=data)
