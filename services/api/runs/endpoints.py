"""``/api/v1/runs``: the run log and one run's full trace (read only, ``manager`` and up [004 §7])."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from services.api.core.auth import Manager
from services.api.core.errors import Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from services.api.runs import service
from services.api.runs.schemas import RunDetail, RunSummary
from switchboard.db.enums import RunRowStatus

router = APIRouter(prefix="/api/v1", tags=["runs"])

Cursor = Annotated[str | None, Query(max_length=200, description="`next_cursor` of the previous page")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
From = Annotated[
    datetime | None, Query(alias="from", description="Runs created at or after this instant (ISO 8601; naive = UTC)")
]
To = Annotated[datetime | None, Query(alias="to", description="Runs created before this instant (exclusive)")]


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


async def _page(
    ctx: Manager,
    *,
    cursor: str | None,
    limit: int,
    agent_id: uuid.UUID | None,
    status: RunRowStatus | None,
    conversation_id: uuid.UUID | None,
    created_from: datetime | None,
    created_to: datetime | None,
    dry_run: bool | None,
    agent_must_exist: bool = False,
) -> Page[RunSummary]:
    before = decode_cursor(cursor)
    views, more = await ctx.session.run_sync(
        lambda s: service.list_runs(
            s,
            org_id=ctx.org_id,
            limit=limit,
            before=before,
            agent_id=agent_id,
            status=status,
            conversation_id=conversation_id,
            created_from=_utc(created_from),
            created_to=_utc(created_to),
            dry_run=dry_run,
            agent_must_exist=agent_must_exist,
        )
    )
    next_cursor = encode_cursor(views[-1].created_at, views[-1].id) if more else None
    return Page(data=views, next_cursor=next_cursor)


@router.get(
    "/runs", response_model=Page[RunSummary], responses=error_responses(Unauthorized, Forbidden, ValidationFailed)
)
async def list_runs(
    ctx: Manager,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    agent_id: uuid.UUID | None = None,
    run_status: Annotated[RunRowStatus | None, Query(alias="status")] = None,
    conversation_id: uuid.UUID | None = None,
    created_from: From = None,
    created_to: To = None,
    dry_run: Annotated[bool | None, Query(description="Only dry runs (true) or only live runs (false)")] = None,
) -> Page[RunSummary]:
    """Runs newest first (created_at desc, id desc), filtered; the trace is on `GET /runs/{id}`."""
    return await _page(
        ctx,
        cursor=cursor,
        limit=limit,
        agent_id=agent_id,
        status=run_status,
        conversation_id=conversation_id,
        created_from=created_from,
        created_to=created_to,
        dry_run=dry_run,
    )


@router.get(
    "/agents/{agent_id}/runs",
    response_model=Page[RunSummary],
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed),
)
async def list_agent_runs(
    agent_id: uuid.UUID,
    ctx: Manager,
    cursor: Cursor = None,
    limit: Limit = DEFAULT_LIMIT,
    run_status: Annotated[RunRowStatus | None, Query(alias="status")] = None,
    conversation_id: uuid.UUID | None = None,
    created_from: From = None,
    created_to: To = None,
    dry_run: bool | None = None,
) -> Page[RunSummary]:
    """One agent's runs [004 §4.3]; the same as `GET /runs?agent_id=`, but 404 for an unknown agent."""
    return await _page(
        ctx,
        cursor=cursor,
        limit=limit,
        agent_id=agent_id,
        status=run_status,
        conversation_id=conversation_id,
        created_from=created_from,
        created_to=created_to,
        dry_run=dry_run,
        agent_must_exist=True,
    )


@router.get(
    "/runs/{run_id}",
    response_model=Envelope[RunDetail],
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed),
)
async def get_run(run_id: uuid.UUID, ctx: Manager) -> Envelope[RunDetail]:
    """One run with its full trace: steps (tool, arguments, result, timing, error), tokens, cost, outcome."""
    view = await ctx.session.run_sync(lambda s: service.get_run(s, org_id=ctx.org_id, run_id=run_id))
    return Envelope(data=view)
