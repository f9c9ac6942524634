"""``/api/v1/agents``: agents, their versions, and the publish / pause / archive life cycle [004 §4.3-4.5].

Reads need ``manager``; every write needs ``admin`` with an MFA-verified session [004 §7].
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Query, Request, status

from services.api.agents import service
from services.api.agents.schemas import (
    AgentCreate,
    AgentPatch,
    AgentStatus,
    AgentView,
    AgentWithVersion,
    DuplicateRequest,
    PublishRequest,
    VersionConfig,
    VersionPatch,
    VersionView,
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
from switchboard.contracts import Serde
from switchboard.db.enums import AgentKind

router = APIRouter(prefix="/api/v1", tags=["agents"])

_READ_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed)
_WRITE_ERRORS = error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed)


def _serde(request: Request) -> Serde:
    serde: Serde = request.app.state.serde
    return serde


def _user(ctx: AdminWrite) -> uuid.UUID | None:
    return ctx.principal.user_id


# --------------------------------------------------------------------------- agents


@router.get(
    "/agents",
    response_model=Page[AgentView],
    responses=error_responses(Unauthorized, Forbidden, ValidationFailed),
)
async def list_agents(
    ctx: Manager,
    cursor: Annotated[str | None, Query(max_length=200, description="`next_cursor` of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    agent_status: Annotated[AgentStatus | None, Query(alias="status", description="Only agents in this state")] = None,
    kind: AgentKind | None = None,
    include_archived: Annotated[bool, Query(description="Archived agents are left out unless asked for")] = False,
) -> Page[AgentView]:
    """Newest first (created_at desc, id desc)."""
    before = decode_cursor(cursor)
    views, more = await ctx.session.run_sync(
        lambda s: service.list_agents(
            s,
            org_id=ctx.org_id,
            limit=limit,
            before=before,
            status=agent_status,
            kind=kind,
            include_archived=include_archived,
        )
    )
    next_cursor = encode_cursor(views[-1].created_at, views[-1].id) if more else None
    return Page(data=views, next_cursor=next_cursor)


@router.post(
    "/agents",
    response_model=Envelope[AgentWithVersion],
    status_code=status.HTTP_201_CREATED,
    responses=_WRITE_ERRORS,
)
async def create_agent(body: AgentCreate, ctx: AdminWrite) -> Envelope[AgentWithVersion]:
    """Create an agent (kind `mcp_agent`) with its first draft version. Nothing answers until a publish."""
    created = await ctx.session.run_sync(
        lambda s: service.create_agent(
            s, org_id=ctx.org_id, actor_user_id=_user(ctx), request_id=ctx.request_id, body=body
        )
    )
    return Envelope(data=created)


@router.get("/agents/{agent_id}", response_model=Envelope[AgentView], responses=_READ_ERRORS)
async def get_agent(agent_id: uuid.UUID, ctx: Manager) -> Envelope[AgentView]:
    """One agent (archived ones too), with its published version id and its latest draft id."""
    view = await ctx.session.run_sync(lambda s: service.get_agent(s, org_id=ctx.org_id, agent_id=agent_id))
    return Envelope(data=view)


@router.patch("/agents/{agent_id}", response_model=Envelope[AgentView], responses=_WRITE_ERRORS)
async def update_agent(agent_id: uuid.UUID, body: AgentPatch, ctx: AdminWrite, request: Request) -> Envelope[AgentView]:
    """Change name, description or priority; on a live agent the change is published to the dispatcher."""
    serde = _serde(request)
    view = await ctx.session.run_sync(
        lambda s: service.update_agent(
            s,
            serde,
            org_id=ctx.org_id,
            agent_id=agent_id,
            actor_user_id=_user(ctx),
            request_id=ctx.request_id,
            body=body,
        )
    )
    return Envelope(data=view)


@router.delete("/agents/{agent_id}", status_code=status.HTTP_204_NO_CONTENT, responses=_WRITE_ERRORS)
async def archive_agent(agent_id: uuid.UUID, ctx: AdminWrite, request: Request) -> None:
    """Archive (soft delete): stops answering, keeps versions and runs; emits `published` with change=archived."""
    serde = _serde(request)
    await ctx.session.run_sync(
        lambda s: service.archive_agent(
            s, serde, org_id=ctx.org_id, agent_id=agent_id, actor_user_id=_user(ctx), request_id=ctx.request_id
        )
    )


@router.post(
    "/agents/{agent_id}:duplicate",
    response_model=Envelope[AgentWithVersion],
    status_code=status.HTTP_201_CREATED,
    responses=_WRITE_ERRORS,
)
async def duplicate_agent(
    agent_id: uuid.UUID, ctx: AdminWrite, body: Annotated[DuplicateRequest | None, Body()] = None
) -> Envelope[AgentWithVersion]:
    """A new agent whose first draft copies the source's latest version."""
    name = body.name if body is not None else None
    created = await ctx.session.run_sync(
        lambda s: service.duplicate_agent(
            s, org_id=ctx.org_id, agent_id=agent_id, actor_user_id=_user(ctx), request_id=ctx.request_id, name=name
        )
    )
    return Envelope(data=created)


@router.post("/agents/{agent_id}:pause", response_model=Envelope[AgentView], responses=_WRITE_ERRORS)
async def pause_agent(agent_id: uuid.UUID, ctx: AdminWrite, request: Request) -> Envelope[AgentView]:
    """Stop answering; emits `published` with change=paused. Publish a version again to resume."""
    serde = _serde(request)
    view = await ctx.session.run_sync(
        lambda s: service.pause_agent(
            s, serde, org_id=ctx.org_id, agent_id=agent_id, actor_user_id=_user(ctx), request_id=ctx.request_id
        )
    )
    return Envelope(data=view)


@router.post("/agents/{agent_id}:publish", response_model=Envelope[AgentWithVersion], responses=_WRITE_ERRORS)
async def publish_version(
    agent_id: uuid.UUID, body: PublishRequest, ctx: AdminWrite, request: Request
) -> Envelope[AgentWithVersion]:
    """Atomic switch [004 §4.5]: previous version superseded, chosen one published, pointer moved,
    audit entry and `published` record, all in one transaction. 409 unless the version is a draft
    (or a superseded one, to roll back or resume) and its model, credential and channel are usable."""
    serde = _serde(request)
    published = await ctx.session.run_sync(
        lambda s: service.publish_version(
            s,
            serde,
            org_id=ctx.org_id,
            agent_id=agent_id,
            version_id=body.version_id,
            actor_user_id=_user(ctx),
            request_id=ctx.request_id,
        )
    )
    return Envelope(data=published)


# --------------------------------------------------------------------------- versions


@router.get("/agents/{agent_id}/versions", response_model=Page[VersionView], responses=_READ_ERRORS)
async def list_versions(
    agent_id: uuid.UUID,
    ctx: Manager,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> Page[VersionView]:
    """Newest version first."""
    views, next_cursor = await ctx.session.run_sync(
        lambda s: service.list_versions(s, org_id=ctx.org_id, agent_id=agent_id, limit=limit, cursor=cursor)
    )
    return Page(data=views, next_cursor=next_cursor)


@router.post(
    "/agents/{agent_id}/versions",
    response_model=Envelope[VersionView],
    status_code=status.HTTP_201_CREATED,
    responses=_WRITE_ERRORS,
)
async def save_version(agent_id: uuid.UUID, body: VersionConfig, ctx: AdminWrite) -> Envelope[VersionView]:
    """Save: a new draft from a full configuration, numbered after the highest existing version."""
    view = await ctx.session.run_sync(
        lambda s: service.save_version(
            s, org_id=ctx.org_id, agent_id=agent_id, actor_user_id=_user(ctx), request_id=ctx.request_id, body=body
        )
    )
    return Envelope(data=view)


@router.get("/agents/{agent_id}/versions/{version_id}", response_model=Envelope[VersionView], responses=_READ_ERRORS)
async def get_version(agent_id: uuid.UUID, version_id: uuid.UUID, ctx: Manager) -> Envelope[VersionView]:
    view = await ctx.session.run_sync(
        lambda s: service.get_version(s, org_id=ctx.org_id, agent_id=agent_id, version_id=version_id)
    )
    return Envelope(data=view)


@router.patch("/agents/{agent_id}/versions/{version_id}", response_model=Envelope[VersionView], responses=_WRITE_ERRORS)
async def patch_version(
    agent_id: uuid.UUID, version_id: uuid.UUID, body: VersionPatch, ctx: AdminWrite
) -> Envelope[VersionView]:
    """Edit a draft (409 otherwise). Absent properties are kept; `trigger_config` and `followup`
    merge only the properties sent [004 §4.4]; lists and `business_hours` are replaced whole."""
    view = await ctx.session.run_sync(
        lambda s: service.patch_version(
            s,
            org_id=ctx.org_id,
            agent_id=agent_id,
            version_id=version_id,
            actor_user_id=_user(ctx),
            request_id=ctx.request_id,
            body=body,
        )
    )
    return Envelope(data=view)
