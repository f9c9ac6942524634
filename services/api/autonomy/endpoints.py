"""``/api/v1/autonomy``: settings per area, kill switches and promotions (admin + MFA to change,
audited); ``/api/v1/decisions``: proposed actions and their approval (manager). The paths are
the ones the Home digest links to (services/brief/digest.yaml). See docs/autonomy.md."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Query, Request
from sqlalchemy.orm import Session

from services.api.autonomy import executor, service
from services.api.autonomy.schemas import (
    ActionAutonomyUpdate,
    ActionView,
    AutonomyUpdate,
    AutonomyView,
    DecisionNote,
    KillSwitchUpdate,
)
from services.api.core.auth import AdminWrite, Manager, RequestContext, Viewer
from services.api.core.database import database
from services.api.core.errors import (
    Forbidden,
    MfaRequired,
    NotFound,
    Unauthorized,
    ValidationFailed,
    error_responses,
)
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from services.api.mcp.tools import CrmTools, ToolFailure
from switchboard.contracts import Serde
from switchboard.db.enums import DecisionStatus

router = APIRouter(prefix="/api/v1", tags=["autonomy"])

_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed)
_WRITE_ERRORS = error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, ValidationFailed)
_DECIDE_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, service.AlreadyDecided, ValidationFailed)


def _user(ctx: RequestContext) -> uuid.UUID | None:
    return ctx.principal.user_id


@router.get("/autonomy", response_model=Envelope[AutonomyView], responses=_ERRORS)
async def get_autonomy(ctx: Viewer) -> Envelope[AutonomyView]:
    """Every area and every action type with its mode as set, its kill switch and the mode agents really get."""
    return Envelope(data=await ctx.session.run_sync(lambda s: service.view(s, ctx.org_id)))


@router.put("/autonomy/areas/{area}", response_model=Envelope[AutonomyView], responses=_WRITE_ERRORS)
async def put_area_autonomy(
    ctx: AdminWrite, area: str, body: Annotated[AutonomyUpdate, Body()]
) -> Envelope[AutonomyView]:
    """Set an area's mode (off / propose / auto); audited."""
    data = await ctx.session.run_sync(
        lambda s: service.set_mode(s, ctx.org_id, area, body.mode, _user(ctx), ctx.request_id)
    )
    return Envelope(data=data)


@router.put("/autonomy/actions/{action_type}", response_model=Envelope[AutonomyView], responses=_WRITE_ERRORS)
async def put_action_autonomy(
    ctx: AdminWrite, action_type: str, body: Annotated[ActionAutonomyUpdate, Body()]
) -> Envelope[AutonomyView]:
    """Give one action type its own mode (propose / auto) over its area's; audited. An area that
    is off and every kill switch still win."""
    data = await ctx.session.run_sync(
        lambda s: service.set_action_mode(s, ctx.org_id, action_type, body.mode, _user(ctx), ctx.request_id)
    )
    return Envelope(data=data)


@router.delete("/autonomy/actions/{action_type}", response_model=Envelope[AutonomyView], responses=_WRITE_ERRORS)
async def delete_action_autonomy(ctx: AdminWrite, action_type: str) -> Envelope[AutonomyView]:
    """The action type follows its area's mode again; audited."""
    data = await ctx.session.run_sync(
        lambda s: service.set_action_mode(s, ctx.org_id, action_type, None, _user(ctx), ctx.request_id)
    )
    return Envelope(data=data)


@router.put("/autonomy/kill-switch", response_model=Envelope[AutonomyView], responses=_WRITE_ERRORS)
async def put_kill_switch(ctx: AdminWrite, body: Annotated[KillSwitchUpdate, Body()]) -> Envelope[AutonomyView]:
    """Engage or clear the org's kill switch (``area`` null) or an area's; audited."""
    data = await ctx.session.run_sync(
        lambda s: service.set_kill_switch(s, ctx.org_id, body.area, body.engaged, _user(ctx), ctx.request_id)
    )
    return Envelope(data=data)


@router.get("/decisions", response_model=Page[ActionView], responses=_ERRORS)
async def list_actions(
    ctx: Viewer,
    status: Annotated[DecisionStatus | None, Query(description="e.g. proposed")] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> Page[ActionView]:
    """Proposed and executed actions, newest first."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(lambda s: service.list_actions(s, ctx.org_id, status, limit + 1, before))
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[ActionView.model_validate(r) for r in page], next_cursor=next_cursor)


@router.post("/decisions/{action_id}:approve", response_model=Envelope[ActionView], responses=_DECIDE_ERRORS)
async def approve_action(
    ctx: Manager, request: Request, action_id: uuid.UUID, body: Annotated[DecisionNote | None, Body()] = None
) -> Envelope[ActionView]:
    """Approve and execute the action, exactly once (a second approval gets 409
    ``action_already_decided``); a paused run resumes with the result."""
    reason = body.reason if body else None
    claimed = await ctx.session.run_sync(
        lambda s: service.claim_decision(s, ctx.org_id, action_id, DecisionStatus.APPROVED, _user(ctx), reason)
    )
    if claimed.run_id is None:
        raise ValidationFailed("the run that proposed this action no longer exists; it cannot be executed")
    tools = CrmTools(sessions=database(request).sessions)
    try:
        claims = executor.claims_for(ctx.org_id, claimed.run_id, claimed.proposed_action)
        result, ok = (
            await executor.execute(
                tools,
                claims,
                claimed.action_type,
                claimed.proposed_action["arguments"],
                proposed_at=claimed.proposed_at,
            ),
            True,
        )
    except ToolFailure as exc:
        result, ok = {"message": str(exc)}, False
    serde: Serde = request.app.state.serde
    await ctx.session.run_sync(lambda s: service.record_execution(s, ctx.org_id, claimed, result, ok))
    data = await ctx.session.run_sync(
        lambda s: service.close_decision(
            s, serde, ctx.org_id, claimed, approved=True, user_id=_user(ctx), request_id=ctx.request_id
        )
    )
    return Envelope(data=data)


@router.post("/decisions/{action_id}:reject", response_model=Envelope[ActionView], responses=_DECIDE_ERRORS)
async def reject_action(
    ctx: Manager, request: Request, action_id: uuid.UUID, body: Annotated[DecisionNote | None, Body()] = None
) -> Envelope[ActionView]:
    """Reject the action (never executed); a paused run resumes with the rejection."""
    reason = body.reason if body else None
    serde: Serde = request.app.state.serde

    def reject(s: Session) -> ActionView:
        claimed = service.claim_decision(s, ctx.org_id, action_id, DecisionStatus.REJECTED, _user(ctx), reason)
        return service.close_decision(
            s, serde, ctx.org_id, claimed, approved=False, user_id=_user(ctx), request_id=ctx.request_id
        )

    return Envelope(data=await ctx.session.run_sync(reject))


@router.post(
    "/autonomy/{area}/promotions/{action_type}:accept", response_model=Envelope[AutonomyView], responses=_WRITE_ERRORS
)
async def accept_promotion(ctx: AdminWrite, area: str, action_type: str, request: Request) -> Envelope[AutonomyView]:
    """Accept the 3-approval suggestion: that action type becomes ``auto`` — not the rest of its
    area (the owner's explicit opt-in); audited."""
    serde: Serde = request.app.state.serde
    data = await ctx.session.run_sync(
        lambda s: service.decide_promotion(s, serde, ctx.org_id, area, action_type, True, _user(ctx), ctx.request_id)
    )
    return Envelope(data=data)


@router.post(
    "/autonomy/{area}/promotions/{action_type}:dismiss", response_model=Envelope[AutonomyView], responses=_ERRORS
)
async def dismiss_promotion(ctx: Manager, area: str, action_type: str, request: Request) -> Envelope[AutonomyView]:
    """Dismiss the suggestion; the mode stays as it is."""
    serde: Serde = request.app.state.serde
    data = await ctx.session.run_sync(
        lambda s: service.decide_promotion(s, serde, ctx.org_id, area, action_type, False, _user(ctx), ctx.request_id)
    )
    return Envelope(data=data)
