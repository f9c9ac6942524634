"""Reading runs: pages of summaries, one run with its trace.

The trace is written by the runner as typed entries — ``kind`` ``model`` (a model
call: usage, cost, stop reason), ``tool`` (``{step, tool_name, args, result,
started_at, ended_at, error?}`` [004 §3.4]) or ``guard`` (a guard acting: name,
detail) — and returned typed (``RunStep``: ``tool_name`` only on tool entries,
``model`` / ``guard`` details on theirs). ``trace_steps`` also accepts the obvious
synonyms (``tool``, ``arguments``, ``duration_ms``) and entries without a ``kind``
(a tool call if they name a tool), so an older or newer runner never makes a run
unreadable, and scrubs secret-shaped values (defense in depth: the runner must not
store them in the first place).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from services.api.core.errors import NotFound, ValidationFailed
from services.api.runs import repository
from services.api.runs.schemas import GuardAction, ModelCall, RunDetail, RunStep, RunSummary, TraceKind, usd
from switchboard.db.enums import ErrorFamily, RunRowStatus, RunVitality, WakeReason
from switchboard.db.models.runs import AiAgentRun
from switchboard.observability.scrubbing import scrub, scrub_text


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _first(entry: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in entry:
            return entry[key]
    return None


def _kind(entry: Mapping[str, Any]) -> TraceKind:
    """The entry's ``kind``; an entry without one (an older runner) is a tool call if it names a tool."""
    try:
        return TraceKind(entry["kind"])
    except (KeyError, ValueError):
        pass
    if "detail" in entry and "name" in entry:
        return TraceKind.GUARD
    return TraceKind.TOOL if _first(entry, "tool_name", "tool", "name") is not None else TraceKind.MODEL


def _model_call(entry: Mapping[str, Any]) -> ModelCall:
    names = entry.get("tool_calls")
    return ModelCall(
        attempts=_int(entry.get("attempts")),
        stop_reason=None if entry.get("stop_reason") is None else str(entry["stop_reason"]),
        text=None if entry.get("text") is None else scrub_text(str(entry["text"])),
        tool_calls=[str(n) for n in names] if isinstance(names, list) else [],
        max_output_tokens=_int(entry.get("max_output_tokens")),
        tokens_in=_int(entry.get("tokens_in")),
        tokens_out=_int(entry.get("tokens_out")),
        cache_read_tokens=_int(entry.get("cache_read_tokens")),
        cache_write_tokens=_int(entry.get("cache_write_tokens")),
        cost_micro_usd=_int(_first(entry, "cost_micros", "cost_micro_usd")),
    )


def trace_steps(raw: Any) -> list[RunStep]:
    steps: list[RunStep] = []
    for index, entry in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(entry, Mapping):
            entry = {"result": entry}
        kind = _kind(entry)
        started, ended = _when(_first(entry, "started_at", "at")), _when(entry.get("ended_at"))
        duration = _int(entry.get("duration_ms"))
        if duration is None and started is not None and ended is not None:
            duration = max(0, int((ended - started).total_seconds() * 1000))
        tool = kind is TraceKind.TOOL
        name = _first(entry, "tool_name", "tool", "name") if tool else None
        call_id = entry.get("tool_call_id")
        is_error = entry.get("is_error")
        steps.append(
            RunStep(
                step=_int(entry.get("step")) if "step" in entry else index + 1,
                kind=kind,
                tool_name=None if name is None else str(name),
                tool_call_id=None if call_id is None or not tool else str(call_id),
                arguments=scrub(_first(entry, "args", "arguments", "input")) if tool else None,
                result=scrub(_first(entry, "result", "output")) if tool else None,
                is_error=is_error if tool and isinstance(is_error, bool) else None,
                error=scrub(entry.get("error")),
                model=_model_call(entry) if kind is TraceKind.MODEL else None,
                guard=GuardAction(
                    name=str(entry.get("name") or "guard"),
                    detail=None if entry.get("detail") is None else scrub_text(str(entry["detail"])),
                )
                if kind is TraceKind.GUARD
                else None,
                subagent_id=None if entry.get("subagent_id") is None else str(entry["subagent_id"]),
                started_at=started,
                ended_at=ended,
                duration_ms=duration,
            )
        )
    return steps


def _summary_fields(run: AiAgentRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "agent_id": run.agent_id,
        "agent_version_id": run.agent_version_id,
        "conversation_id": run.conversation_id,
        "contact_id": run.contact_id,
        "channel_session_id": run.channel_session_id,
        "status": RunRowStatus(run.status),
        "vitality": None if run.vitality is None else RunVitality(run.vitality),
        "error_family": None if run.error_family is None else ErrorFamily(run.error_family),
        "error_code": run.error_code,
        "abort_reason": run.abort_reason,
        "wake_reason": WakeReason(run.wake_reason),
        "attempt": run.attempt,
        "parent_run_id": run.parent_run_id,
        "is_dry_run": run.is_dry_run,
        "provider": run.provider,
        "model": run.model,
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "cost_micro_usd": run.cost_micros,
        "cost_usd": usd(run.cost_micros),
        "latency_ms": run.latency_ms,
        "steps_count": run.steps_count,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "completed_at": run.completed_at,
    }


def summary(run: AiAgentRun) -> RunSummary:
    return RunSummary(**_summary_fields(run))


def detail(run: AiAgentRun) -> RunDetail:
    return RunDetail(
        **_summary_fields(run),
        error_message=None if run.error_message is None else scrub_text(run.error_message),
        inbound_message_id=run.inbound_message_id,
        inbound_message_ids=list(run.inbound_message_ids),
        outbound_message_id=run.outbound_message_id,
        wake_context=dict(run.wake_context),
        final_text=run.final_text,
        summary=run.summary,
        would_send_to=run.would_send_to,
        actions_executed=scrub(list(run.actions_executed)),
        actions_proposed=scrub(list(run.actions_proposed)),
        heartbeat_at=run.heartbeat_at,
        updated_at=run.updated_at,
        trace=trace_steps(run.tool_calls),
        prompt=scrub(run.prompt) if run.prompt else None,
        classification=run.classification,
    )


def list_runs(
    session: Session,
    *,
    org_id: uuid.UUID,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
    agent_id: uuid.UUID | None,
    status: RunRowStatus | None,
    conversation_id: uuid.UUID | None,
    created_from: datetime | None,
    created_to: datetime | None,
    dry_run: bool | None,
    agent_must_exist: bool = False,
) -> tuple[list[RunSummary], bool]:
    """One page and whether more follow."""
    if created_from is not None and created_to is not None and created_from >= created_to:
        raise ValidationFailed("`from` must be before `to`", details={"field": "from"})
    if agent_must_exist and agent_id is not None and not repository.agent_exists(session, org_id, agent_id):
        raise NotFound("No such agent")
    rows = repository.runs(
        session,
        org_id,
        limit=limit + 1,
        before=before,
        agent_id=agent_id,
        status=None if status is None else status.value,
        conversation_id=conversation_id,
        created_from=created_from,
        created_to=created_to,
        dry_run=dry_run,
    )
    page = rows[:limit]
    delivered = repository.delivery_statuses(session, org_id, [r.id for r in page])
    return [summary(r).model_copy(update={"delivery_status": delivered.get(r.id)}) for r in page], len(rows) > limit


def get_run(session: Session, *, org_id: uuid.UUID, run_id: uuid.UUID) -> RunDetail:
    run = repository.run(session, org_id, run_id)
    if run is None:
        raise NotFound("No such run")
    delivered = repository.delivery_statuses(session, org_id, [run.id])
    return detail(run).model_copy(update={"delivery_status": delivered.get(run.id)})
