"""``POST /api/v1/agents/{id}/versions/{vid}:test`` and ``GET /api/v1/runs/{id}/events`` (SSE).

Settings (env, prefix ``API_``): ``API_DRY_RUN_TIMEOUT_S`` (default 60) bounds how long
the test endpoint waits; past it the answer is ``202`` with what is known so far (the
run keeps going; its trace and events stay available).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field, field_validator
from pydantic_settings import SettingsConfigDict
from sqlalchemy import select

from services.api.core.auth import AdminWrite, Manager
from services.api.core.database import Database
from services.api.core.errors import NotFound, error_responses
from services.api.core.responses import Envelope
from services.api.runs.schemas import RunDetail, RunStep, usd
from services.api.runs.service import detail
from services.api.runs_live import service
from switchboard.contracts import Serde
from switchboard.db.enums import ACTIVE_RUN_STATUSES
from switchboard.db.models import AiAgentRun
from switchboard.db.session import async_tenant_transaction
from switchboard.settings import KafkaSettings, SharedSettings, stack_env_files

router = APIRouter(prefix="/api/v1", tags=["runs"])


class LiveRunSettings(SharedSettings):
    model_config = SettingsConfigDict(env_prefix="API_", env_file=stack_env_files(), extra="ignore", frozen=True)

    dry_run_timeout_s: float = Field(default=60.0, gt=0, le=600)


class SampleContact(BaseModel):
    name: str | None = Field(default=None, max_length=200)
    phone: str | None = Field(
        default=None,
        max_length=32,
        description="E.164 (spaces, dashes and parentheses are dropped); on the test contact",
    )

    @field_validator("phone")
    @classmethod
    def _e164(cls, value: str | None) -> str | None:
        """As contacts store it: ``+`` and 7 to 15 digits."""
        if value is None:
            return None
        compact = re.sub(r"[\s().-]", "", value)
        if not re.fullmatch(r"\+[1-9][0-9]{6,14}", compact):
            raise ValueError("phone must be an E.164 number, e.g. +5511912345678")
        return compact


class DryRunBody(BaseModel):
    sample_message: str = Field(min_length=1, max_length=4096)
    sample_contact: SampleContact | None = None


class DryRunResult(BaseModel):
    """What the test shows [004 §4.4]; ``run`` is the full record (as ``GET /runs/{id}``)."""

    run_id: uuid.UUID | None
    status: str
    final_text: str | None
    tool_calls: list[RunStep]
    tokens_in: int
    tokens_out: int
    cost_micro_usd: int
    cost_usd: str
    latency_ms: int | None
    would_send_to: dict[str, Any] | None
    run: RunDetail | None
    # The test's handle while its run is not there yet (a 202): its runs are
    # ``GET /api/v1/runs?conversation_id=…&dry_run=true``; the sample message is ``message_id``.
    conversation_id: uuid.UUID
    message_id: uuid.UUID


def _result(run: AiAgentRun | None, ticket: service.DryRunTicket) -> DryRunResult:
    handle = {"conversation_id": ticket.conversation_id, "message_id": ticket.message_id}
    if run is None:
        return DryRunResult(
            **handle,
            run_id=None,
            status="queued",
            final_text=None,
            tool_calls=[],
            tokens_in=0,
            tokens_out=0,
            cost_micro_usd=0,
            cost_usd=usd(0),
            latency_ms=None,
            would_send_to=None,
            run=None,
        )
    full = detail(run)
    return DryRunResult(
        **handle,
        run_id=run.id,
        status=run.status,
        final_text=run.final_text,
        tool_calls=full.trace,
        tokens_in=run.tokens_in,
        tokens_out=run.tokens_out,
        cost_micro_usd=run.cost_micros,
        cost_usd=usd(run.cost_micros),
        latency_ms=run.latency_ms,
        would_send_to=run.would_send_to,
        run=full,
    )


@router.post(
    "/agents/{agent_id}/versions/{version_id}:test",
    response_model=Envelope[DryRunResult],
    responses={
        202: {"model": Envelope[DryRunResult], "description": "still running at the deadline"},
        **error_responses(NotFound, service.DryRunRefused),
    },
    summary="Test a version with a sample message (dry run: nothing is sent)",
)
async def test_version(
    agent_id: uuid.UUID, version_id: uuid.UUID, body: DryRunBody, ctx: AdminWrite, request: Request
) -> JSONResponse:
    db: Database = request.app.state.database
    serde: Serde = request.app.state.serde
    caller = str(ctx.principal.user_id or ctx.principal.token_id)
    ticket = await service.request_dry_run(
        db.sessions,
        serde,
        service.DryRunRequest(
            org_id=ctx.org_id,
            agent_id=agent_id,
            version_id=version_id,
            caller=caller,
            sample_message=body.sample_message,
            contact_name=body.sample_contact.name if body.sample_contact else None,
            contact_phone=body.sample_contact.phone if body.sample_contact else None,
            request_id=ctx.request_id or None,
            actor_user_id=ctx.principal.user_id,
        ),
    )
    # The request's own transaction (the token lookup) ends here: waiting for the run must not
    # hold a pooled connection for up to the deadline (webhooks share the pool).
    await ctx.session.commit()
    run = await service.wait_for_run(
        db.sessions,
        ctx.org_id,
        ticket,
        timeout_s=LiveRunSettings().dry_run_timeout_s,
        draining=request.app.state.draining,
    )
    result = _result(run, ticket)
    done = run is not None and run.status not in {s.value for s in ACTIVE_RUN_STATUSES}
    return JSONResponse(Envelope[DryRunResult](data=result).model_dump(mode="json"), status_code=200 if done else 202)


# The ids this stream sends are event ``seq``s (int64): at most 19 ASCII digits.
_EVENT_ID = re.compile(r"[0-9]{1,19}")


def resume_after(last_event_id: str | None) -> int:
    """The ``seq`` a reconnecting client saw last (``Last-Event-ID``), or 0: replay from the start.

    Anything that is not an id this stream sent (not ASCII digits, ``"²"``, thousands of digits
    that ``int()`` refuses) is treated as absent rather than refused: a browser's EventSource
    stops reconnecting on a 4xx, and replaying from the start only repeats events the client
    can recognise by their ``seq``, while a refusal would lose the rest of the run.
    """
    if last_event_id is None or not _EVENT_ID.fullmatch(last_event_id):
        return 0
    return int(last_event_id)


@router.get(
    "/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}, **error_responses(NotFound)},
    summary="A run's live events as server-sent events (replayed from the start for late clients)",
)
async def run_events(
    run_id: uuid.UUID,
    ctx: Manager,
    request: Request,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    run = await ctx.session.scalar(select(AiAgentRun).where(AiAgentRun.org_id == ctx.org_id, AiAgentRun.id == run_id))
    if run is None or run.conversation_id is None:
        raise NotFound("No such run")
    db: Database = request.app.state.database
    kafka: KafkaSettings = request.app.state.settings.kafka
    serde: Serde = request.app.state.serde
    org_id = ctx.org_id
    after_seq = resume_after(last_event_id)
    conversation_id, created_at = run.conversation_id, run.created_at

    async def final_status() -> str | None:
        async with db.sessions() as session, async_tenant_transaction(session, org_id):
            status = await session.scalar(
                select(AiAgentRun.status).where(AiAgentRun.org_id == org_id, AiAgentRun.id == run_id)
            )
        return None if status in {s.value for s in ACTIVE_RUN_STATUSES} else status

    async def finished() -> bool:
        return await final_status() is not None

    draining: asyncio.Event = request.app.state.draining

    async def stream() -> AsyncIterator[bytes]:
        seen_done = False
        async for event in service.run_events(
            kafka=kafka,
            serde=serde,
            run_id=run_id,
            conversation_id=conversation_id,
            created_at=created_at,
            after_seq=after_seq,
            run_finished=finished,
            stop=draining,
        ):
            if event is None:
                yield b": keep-alive\n\n"
                continue
            seen_done = seen_done or event.type.value == "done"
            yield service.sse(event.type.value, json.dumps(service.event_json(event)), str(event.seq))
        if draining.is_set() and not seen_done:
            return  # this replica stops: the client's EventSource reconnects with Last-Event-ID
        if not seen_done:
            status = await final_status()
            yield service.sse("done", json.dumps({"run_id": str(run_id), "type": "done", "status": status}))

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
