"""``/api/v1/skills``: the bodies of the org's skills (docs/api.md "Skills").

A version grants skills by name (``ai_agent_versions.skills``); ``/skill:<name>`` makes the body
stored here the directive of the turn (docs/agent-context.md). Bodies are per org, like the
``agent_skills`` table the runner reads, so one body serves every agent granting that name.
Reads need ``manager``; writes need ``admin`` with an MFA-verified session, and are audited.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Final

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Boolean, delete, func, literal_column, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.api.core.auth import AdminWrite, Manager
from services.api.core.errors import (
    Forbidden,
    MfaRequired,
    NotFound,
    Unauthorized,
    ValidationFailed,
    error_responses,
)
from services.api.core.responses import Envelope
from switchboard.db.audit import record_audit
from switchboard.db.models.slash import AgentSkill

# Same grammar as the slash parser's ``/skill:<name>`` and the table's CHECK constraint.
SKILL_NAME_PATTERN: Final = r"^[a-z0-9][a-z0-9_.\-]{0,63}$"
MAX_SKILL_BODY_CHARS: Final = 20_000  # the table's CHECK constraint

# Its own prefix, included by the app itself: a router nested without one shows its routes'
# templates without ``/api/v1`` to the request metrics (``scope["route"].path``).
router = APIRouter(prefix="/api/v1", tags=["agents"])

SkillName = Annotated[
    str,
    Path(pattern=SKILL_NAME_PATTERN, description="Lower-case letters, digits, '-', '_' or '.'; at most 64 characters"),
]


class SkillBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    body: str = Field(min_length=1, max_length=MAX_SKILL_BODY_CHARS, description="The directive of a `/skill` turn")

    @field_validator("body")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("body must not be blank")
        return value


class SkillView(BaseModel):
    id: uuid.UUID
    name: str
    body: str
    created_at: datetime
    updated_at: datetime


def _view(row: AgentSkill) -> SkillView:
    return SkillView(id=row.id, name=row.name, body=row.body, created_at=row.created_at, updated_at=row.updated_at)


# --------------------------------------------------------------------------- service


def list_skills(session: Session, *, org_id: uuid.UUID) -> list[SkillView]:
    rows = session.scalars(select(AgentSkill).where(AgentSkill.org_id == org_id).order_by(AgentSkill.name))
    return [_view(row) for row in rows]


def get_skill(session: Session, *, org_id: uuid.UUID, name: str) -> SkillView:
    row = session.scalar(select(AgentSkill).where(AgentSkill.org_id == org_id, AgentSkill.name == name))
    if row is None:
        raise NotFound("No such skill")
    return _view(row)


def put_skill(
    session: Session, *, org_id: uuid.UUID, name: str, body: str, actor_user_id: uuid.UUID | None, request_id: str
) -> tuple[SkillView, bool]:
    """Create or replace in one statement (concurrent PUTs of a new name never collide); True when created."""
    skill_id, created = session.execute(
        insert(AgentSkill)
        .values(org_id=org_id, name=name, body=body)
        .on_conflict_do_update(
            index_elements=[AgentSkill.org_id, AgentSkill.name], set_={"body": body, "updated_at": func.now()}
        )
        .returning(AgentSkill.id, literal_column("xmax = 0", Boolean).label("created"))
    ).one()
    record_audit(
        session,
        org_id=org_id,
        action="agent_skill.created" if created else "agent_skill.replaced",
        actor_user_id=actor_user_id,
        target_type="agent_skill",
        target_id=skill_id,
        request_id=request_id,
        details={"name": name, "body_chars": len(body)},
    )
    session.flush()
    session.expire_all()
    return get_skill(session, org_id=org_id, name=name), created


def delete_skill(
    session: Session, *, org_id: uuid.UUID, name: str, actor_user_id: uuid.UUID | None, request_id: str
) -> None:
    skill_id = session.scalar(
        delete(AgentSkill).where(AgentSkill.org_id == org_id, AgentSkill.name == name).returning(AgentSkill.id)
    )
    if skill_id is None:
        raise NotFound("No such skill")
    record_audit(
        session,
        org_id=org_id,
        action="agent_skill.deleted",
        actor_user_id=actor_user_id,
        target_type="agent_skill",
        target_id=skill_id,
        request_id=request_id,
        details={"name": name},
    )


# --------------------------------------------------------------------------- endpoints

_READ_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed)
_WRITE_ERRORS = error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, ValidationFailed)


@router.get("/skills", response_model=Envelope[list[SkillView]], responses=_READ_ERRORS)
async def list_skills_endpoint(ctx: Manager) -> Envelope[list[SkillView]]:
    """Every skill body of the org, by name (a short list: no pagination)."""
    views = await ctx.session.run_sync(lambda s: list_skills(s, org_id=ctx.org_id))
    return Envelope(data=views)


@router.get("/skills/{name}", response_model=Envelope[SkillView], responses=_READ_ERRORS)
async def get_skill_endpoint(name: SkillName, ctx: Manager) -> Envelope[SkillView]:
    """One skill body; another org's skill is a 404."""
    view = await ctx.session.run_sync(lambda s: get_skill(s, org_id=ctx.org_id, name=name))
    return Envelope(data=view)


@router.put("/skills/{name}", response_model=Envelope[SkillView], responses=_WRITE_ERRORS)
async def put_skill_endpoint(
    name: SkillName, payload: SkillBody, ctx: AdminWrite, response: Response
) -> Envelope[SkillView]:
    """Create (201) or replace (200) the body of skill ``name``; the next ``/skill:<name>`` turn uses it."""
    view, created = await ctx.session.run_sync(
        lambda s: put_skill(
            s,
            org_id=ctx.org_id,
            name=name,
            body=payload.body,
            actor_user_id=ctx.principal.user_id,
            request_id=ctx.request_id,
        )
    )
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return Envelope(data=view)


@router.delete("/skills/{name}", status_code=status.HTTP_204_NO_CONTENT, responses=_WRITE_ERRORS)
async def delete_skill_endpoint(name: SkillName, ctx: AdminWrite) -> Response:
    """Delete the body; versions still granting the name answer ``/skill:<name>`` with "Unknown skill"."""
    await ctx.session.run_sync(
        lambda s: delete_skill(
            s, org_id=ctx.org_id, name=name, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
