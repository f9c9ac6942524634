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
from typing import Any

from pydantic import BaseModel

from switchboard.db.enums import ErrorFamily, RunStatus, RunVitality, WakeReason

MICROS_PER_USD = 1_000_000


def usd(micros: int) -> str:
    """Micro-USD as an exact decimal string with six places."""
    return str((Decimal(micros) / MICROS_PER_USD).quantize(Decimal("0.000001")))


class RunStep(BaseModel):
    """One step of a run's trace: a tool call with its arguments, result, timing and error."""

    step: int | None
    tool_name: str | None
    tool_call_id: str | None
    arguments: Any
    result: Any
    error: Any
    started_at: datetime | None
    ended_at: datetime | None
    duration_ms: int | None


class RunSummary(BaseModel):
    id: uuid.UUID
    agent_id: uuid.UUID
    agent_version_id: uuid.UUID
    conversation_id: uuid.UUID | None
    contact_id: uuid.UUID | None
    channel_session_id: uuid.UUID | None
    status: RunStatus
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
