"""Runs as the API shows them: a summary per row in lists, the full trace for one run.

Money is micro-USD (``cost_micro_usd``, exact integers as stored) plus
``cost_usd``, the same amount as a decimal string for humans ("0.004210").
The trace is what the runner persisted in ``ai_agent_runs.tool_calls``; it is
read leniently (a step with an unexpected shape still shows) and scrubbed of
anything shaped like a secret before it leaves the API.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from switchboard.db.enums import ErrorFamily, RunRowStatus, RunVitality, WakeReason

MICROS_PER_USD = 1_000_000


class ReplyDelivery(StrEnum):
    """The reply's delivery as the API tells it (the notifier's ``run_deliveries.status``, where a
    reply ``claimed`` — waiting its turn behind the run's queued messages — reads ``sending``)."""

    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    UNKNOWN = "unknown"


def usd(micros: int) -> str:
    """Micro-USD as an exact decimal string with six places."""
    return str((Decimal(micros) / MICROS_PER_USD).quantize(Decimal("0.000001")))


class TraceKind(StrEnum):
    """What a trace entry records."""

    MODEL = "model"  # one model call (with its retries)
    TOOL = "tool"  # one tool call with its arguments and result
    GUARD = "guard"  # a guard of the loop acted: budget stop, doom-loop nudge, watchdog, interrupt...


class ModelCall(BaseModel):
    """A ``model`` entry: what the model was asked for and answered, with its usage and cost."""

    attempts: int | None = Field(description="Calls made, retries included.")
    stop_reason: str | None
    text: str | None = Field(description="The answer's text (clipped).")
    tool_calls: list[str] = Field(description="Names of the tools the model asked for.")
    max_output_tokens: int | None
    tokens_in: int | None
    tokens_out: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    cost_micro_usd: int | None


class GuardAction(BaseModel):
    """A ``guard`` entry: which guard acted and why."""

    name: str = Field(description="e.g. budget_stop, doom_loop_nudge, silence_watchdog, interrupt.")
    detail: str | None


class RunStep(BaseModel):
    """One entry of a run's trace, in order: a model call, a tool call, or a guard acting."""

    step: int | None = Field(description="The loop step the entry belongs to (1-based).")
    kind: TraceKind
    tool_name: str | None = Field(description="`tool` entries: the tool called; null for `model` and `guard`.")
    tool_call_id: str | None
    arguments: Any = Field(description="`tool` entries: the arguments as the model sent them.")
    result: Any = Field(description="`tool` entries: the result the model got.")
    is_error: bool | None = Field(description="`tool` entries: the result is an error the model saw.")
    error: Any = Field(description="What went wrong: a tool's error, or a failed model call's error code.")
    model: ModelCall | None = Field(description="`model` entries only.")
    guard: GuardAction | None = Field(description="`guard` entries only.")
    started_at: datetime | None
    ended_at: datetime | None
    duration_ms: int | None
    # Issue 6 item 9: an entry of a sub-agent's nested loop names that agent (docs/agent-context.md).
    subagent_id: str | None = Field(default=None, description="Entries made by a sub-agent: its agent id.")


class RunSummary(BaseModel):
    id: uuid.UUID
    agent_id: uuid.UUID
    agent_version_id: uuid.UUID
    conversation_id: uuid.UUID | None
    contact_id: uuid.UUID | None
    channel_session_id: uuid.UUID | None
    status: RunRowStatus
    # How the run really went; ``completed`` alone never means the reply was delivered [002].
    vitality: RunVitality | None
    error_family: ErrorFamily | None
    error_code: str | None
    abort_reason: str | None
    wake_reason: WakeReason
    attempt: int
    parent_run_id: uuid.UUID | None
    is_dry_run: bool
    provider: str | None
    model: str | None
    tokens_in: int
    tokens_out: int
    cost_micro_usd: int
    cost_usd: str
    latency_ms: int | None
    steps_count: int
    # The reply's delivery (notifier): sending, sent, failed ("completed but not delivered"),
    # unknown (interrupted mid-send, never re-sent); null when there was nothing to deliver.
    delivery_status: ReplyDelivery | None = None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None


class RunDetail(RunSummary):
    error_message: str | None
    inbound_message_id: uuid.UUID | None
    inbound_message_ids: list[uuid.UUID]
    outbound_message_id: uuid.UUID | None
    wake_context: dict[str, Any]
    final_text: str | None
    summary: str | None
    would_send_to: dict[str, Any] | None
    actions_executed: list[Any]
    actions_proposed: list[Any]
    heartbeat_at: datetime | None
    updated_at: datetime
    trace: list[RunStep]
    # The composed prompt the model started from, pseudonymized as the model saw it (docs/agent-context.md).
    prompt: dict[str, Any] | None = None
    # Issue 6 item 9: {intent, urgency, category, tone} of the inbound message(s); null when not classified.
    classification: dict[str, str] | None = None
