"""``/api/v1/home``, ``/api/v1/usage`` and ``/api/v1/budget-incidents``.

Reads need ``viewer`` (the Home is for everyone in the org); to-do writes need ``manager``.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Annotated

from fastapi import APIRouter, Body, Query, status

from services.api.core.auth import Manager, Viewer
from services.api.core.errors import Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from services.api.home import repository, service
from services.api.home.schemas import (
    BudgetIncidentView,
    DailyBriefView,
    HomePrefs,
    TodoCreate,
    TodoView,
    UsageView,
)

router = APIRouter(prefix="/api/v1", tags=["home"])

_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed)


@router.get("/home/daily-brief", response_model=Envelope[DailyBriefView], responses=_ERRORS)
async def get_daily_brief(
    ctx: Viewer,
    day: Annotated[
        date | None, Query(alias="date", description="YYYY-MM-DD, the org's local day; default today")
    ] = None,
) -> Envelope[DailyBriefView]:
    """The digest as the brief stored it (one row read); 404 until the brief wrote that day."""
    view = await ctx.session.run_sync(lambda s: service.daily_brief(s, ctx.org_id, day))
    return Envelope(data=view)


@router.get("/home/prefs", response_model=Envelope[HomePrefs], responses=_ERRORS)
async def get_home_prefs(ctx: Viewer) -> Envelope[HomePrefs]:
    """The sections and areas the org's Home shows first."""
    return Envelope(data=await ctx.session.run_sync(lambda s: service.home_prefs(s, ctx.org_id)))


@router.put("/home/prefs", response_model=Envelope[HomePrefs], responses=_ERRORS)
async def put_home_prefs(ctx: Manager, body: Annotated[HomePrefs, Body()]) -> Envelope[HomePrefs]:
    """Pin sections and areas (replaces the pins; today's digest is re-ordered at once);
    ``422 home_prefs_invalid`` for an unknown section or area."""
    return Envelope(data=await ctx.session.run_sync(lambda s: service.set_home_prefs(s, ctx.org_id, body)))


@router.post("/home/todos", response_model=Envelope[TodoView], status_code=status.HTTP_201_CREATED, responses=_ERRORS)
async def create_todo(ctx: Manager, body: Annotated[TodoCreate, Body()]) -> Envelope[TodoView]:
    """Add an item to the owner's to-do list (today's digest lists it at once)."""
    view = await ctx.session.run_sync(lambda s: service.create_todo(s, ctx.org_id, body))
    return Envelope(data=view)


@router.post("/home/todos/{todo_id}:done", response_model=Envelope[TodoView], responses=_ERRORS)
async def complete_todo(ctx: Manager, todo_id: uuid.UUID) -> Envelope[TodoView]:
    """Mark an item done (idempotent); it leaves today's digest."""
    view = await ctx.session.run_sync(lambda s: service.complete_todo(s, ctx.org_id, todo_id))
    return Envelope(data=view)


@router.get("/usage", response_model=Envelope[UsageView], responses=_ERRORS)
async def get_usage(
    ctx: Viewer,
    month: Annotated[str | None, Query(max_length=7, description="YYYY-MM (UTC); default this month")] = None,
) -> Envelope[UsageView]:
    """Tokens, cost and runs of the org and of each agent for the month."""
    first_day = service.parse_month(month)
    view = await ctx.session.run_sync(lambda s: service.usage(s, ctx.org_id, first_day))
    return Envelope(data=view)


@router.get("/budget-incidents", response_model=Page[BudgetIncidentView], responses=_ERRORS)
async def list_budget_incidents(
    ctx: Viewer,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> Page[BudgetIncidentView]:
    """Newest first (created_at desc, id desc)."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: repository.budget_incidents(s, ctx.org_id, limit=limit + 1, before=before)
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[BudgetIncidentView.model_validate(r) for r in page], next_cursor=next_cursor)
