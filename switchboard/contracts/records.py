"""Typed records, one per topic, mirroring ``schemas/<topic>.avsc`` field for field.

Why hand-written models and not dicts: services build and read records with type checking
and IDE help, and a bad value fails where it is created, not in a consumer three services
away. Why not generated: the models stay readable; ``tests/unit/contracts`` compares every
model with its schema (field names, order, nullability, defaults, enum symbols), so the two
cannot drift. The ``.avsc`` files are the documented contract: read the field docs there.

Conventions:

- Frozen pydantic models; extra fields are refused (a typo is an error, not a lost field).
- Avro ``uuid`` is ``UUID``; ``timestamp-millis`` is an aware ``datetime`` normalized to UTC
  and truncated to the millisecond, so a record equals itself after a round trip.
- Avro arrays are tuples (records are immutable); Avro ``int`` and ``long`` are range-checked.
- ``event_id`` and ``occurred_at`` default to a fresh uuid4 and now: a producer that retries
  must reuse the same record object (or the outbox row's id), never build a new one.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Annotated
from uuid import UUID, uuid4

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

from switchboard.contracts.enums import (
    AgentVersionStatus,
    ConcurrencyPolicy,
    DispatchOutcome,
    ErrorFamily,
    HandoffTrigger,
    InsightKind,
    InsightStatus,
    MessageContentType,
    PublishedChange,
    RunEventType,
    RunStatus,
    SteeringKind,
    Urgency,
    Vitality,
    WakeReason,
    Weekday,
)

__all__ = [
    "Action",
    "AgentPublished",
    "AgentVersionSnapshot",
    "BusinessHours",
    "DeadLetter",
    "DebugInfo",
    "DispatchDecided",
    "DispatchRequested",
    "DispatcherTick",
    "FollowUpConfig",
    "HandoffTriggered",
    "Header",
    "HumanMessageRequested",
    "InboundMessage",
    "Insight",
    "Record",
    "RunCompleted",
    "RunError",
    "RunEvent",
    "RunHeartbeat",
    "RunRequested",
    "RunStarted",
    "SendTarget",
    "SteeringMessage",
    "SuggestedAction",
    "ToolCall",
    "ToolResult",
    "TriggerConfig",
    "UsageDelta",
    "WakeContext",
    "WeeklyWindow",
    "utc_now",
]


def _to_utc_millis(value: datetime) -> datetime:
    """Avro timestamp-millis keeps milliseconds in UTC; normalize so round trips are exact."""
    value = value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


def utc_now() -> datetime:
    """The current time as records store it (UTC, millisecond precision)."""
    return _to_utc_millis(datetime.now(UTC))


Timestamp = Annotated[AwareDatetime, AfterValidator(_to_utc_millis)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class _Model(BaseModel):
    """Base of every record and nested record: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Record(_Model):
    """Base of the top-level record of a topic (what a producer sends and a consumer gets)."""

    event_id: UUID = Field(default_factory=uuid4)
    occurred_at: Timestamp = Field(default_factory=utc_now)


# --------------------------------------------------------------------------- nested records


class InboundMessage(_Model):
    """A customer message as stored by ingest: what a run answers."""

    message_id: UUID
    external_id: str
    chat_id: str
    text: str
    received_at: Timestamp
    from_me: bool = False
    is_group: bool = False
    content_type: MessageContentType = MessageContentType.TEXT


class WakeContext(_Model):
    """Ids that come with the wake reason; each reason sets the ones it has."""

    message_id: UUID | None = None
    run_id: UUID | None = None
    follow_up_id: UUID | None = None
    pipeline_run_id: UUID | None = None
    assigned_by_user_id: UUID | None = None


class SendTarget(_Model):
    """Where a reply goes on the channel."""

    channel_session_id: UUID
    chat_id: str


class Action(_Model):
    """A write-tool action, executed (autonomy auto) or proposed (autonomy propose)."""

    action_id: UUID
    action_type: str
    tool_name: str
    area: str
    summary: str
    arguments_json: str
    executed_at: Timestamp | None = None


class ToolCall(_Model):
    """A tool invocation requested by the model."""

    tool_call_id: str
    tool_name: str
    arguments_json: str


class ToolResult(_Model):
    """The result of a tool call."""

    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    is_partial: bool = False
    duration_ms: Int64 | None = None


class UsageDelta(_Model):
    """Tokens and cost of one measurement window; cost in micro-USD (1 USD = 1,000,000)."""

    tokens_in: Int64
    tokens_out: Int64
    cache_read_tokens: Int64 = 0
    cache_write_tokens: Int64 = 0
    cost_micro_usd: Int64
    model: str


class RunError(_Model):
    """An error met during a run."""

    code: str
    message: str
    family: ErrorFamily = ErrorFamily.UNKNOWN
    retryable: bool = False


class DebugInfo(_Model):
    """Runtime diagnostics: start markers, guard decisions, contract nudges."""

    name: str
    detail: str


class WeeklyWindow(_Model):
    """An opening window on one day, in minutes after local midnight, end exclusive."""

    weekday: Weekday
    start_minute: Int32
    end_minute: Int32


class BusinessHours(_Model):
    """When an agent may answer, in an IANA time zone."""

    time_zone: str
    windows: tuple[WeeklyWindow, ...]


class TriggerConfig(_Model):
    """Which events wake an agent."""

    event_types: tuple[str, ...]
    ignore_groups: bool = True
    ignore_own: bool = True
    keyword_regex: str | None = None
    business_hours: BusinessHours | None = None


class FollowUpConfig(_Model):
    """Follow-up behavior of an agent version."""

    enabled: bool = True
    callback_enabled: bool = True
    flow_pointer_ids: tuple[str, ...] = ()


class AgentVersionSnapshot(_Model):
    """Full configuration of one agent version plus the agent fields dispatch ranks by."""

    version_id: UUID
    agent_id: UUID
    version_number: Int32
    agent_name: str
    priority: Int32
    agent_created_at: Timestamp
    system_prompt: str
    provider: str
    model: str
    credential_id: UUID | None = None
    tool_ids: tuple[str, ...]
    trigger: TriggerConfig
    channel_session_id: UUID
    max_steps: Int32
    token_budget: Int32
    cost_budget_cents: Int32
    history_message_window: Int32
    history_token_window: Int32
    handoff_keywords: tuple[str, ...]
    handoff_tool_enabled: bool = True
    followup: FollowUpConfig
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.ENQUEUE
    status: AgentVersionStatus
    created_at: Timestamp
    published_at: Timestamp | None = None


class SuggestedAction(_Model):
    """An action the owner can take from an insight card."""

    action_type: str
    label: str
    arguments_json: str


class Header(_Model):
    """A Kafka record header, kept in a dead letter."""

    key: str
    value: bytes | None = None


# --------------------------------------------------------------------------- topic records


class DispatchRequested(Record):
    """``dispatch_requested``: something happened that may wake one agent."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    contact_id: UUID
    channel_session_id: UUID
    wake_reason: WakeReason
    wake_context: WakeContext
    message: InboundMessage | None = None
    target_agent_id: UUID | None = None
    target_version_id: UUID | None = None
    dry_run: bool = False
    excluded_agent_ids: tuple[UUID, ...] = ()


class RunRequested(Record):
    """``run_requested``: run one agent version in one conversation."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    contact_id: UUID
    channel_session_id: UUID
    run_id: UUID
    agent_id: UUID
    version_id: UUID
    attempt: Int32 = 1
    parent_run_id: UUID | None = None
    wake_reason: WakeReason
    wake_context: WakeContext
    messages: tuple[InboundMessage, ...] = ()
    dispatch_ids: tuple[UUID, ...] = ()
    dry_run: bool = False


class RunStarted(Record):
    """``run_started``: a runner took a run and began executing it."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    run_id: UUID
    agent_id: UUID
    version_id: UUID
    attempt: Int32 = 1
    parent_run_id: UUID | None = None
    wake_reason: WakeReason
    provider: str
    model: str
    runner_id: str
    started_at: Timestamp
    dry_run: bool = False


class RunEvent(Record):
    """``run_events``: one typed stream event; ``type`` says which payload is set."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    run_id: UUID
    agent_id: UUID
    seq: Int64
    type: RunEventType
    text: str | None = None
    tool_call: ToolCall | None = None
    tool_result: ToolResult | None = None
    usage: UsageDelta | None = None
    error: RunError | None = None
    debug: DebugInfo | None = None
    status: RunStatus | None = None
    dry_run: bool = False


class RunCompleted(Record):
    """``run_completed``: outcome, usage and cost of a finished run (billing reads it)."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    contact_id: UUID
    channel_session_id: UUID
    run_id: UUID
    agent_id: UUID
    version_id: UUID
    attempt: Int32 = 1
    parent_run_id: UUID | None = None
    wake_reason: WakeReason
    message_ids: tuple[UUID, ...] = ()
    dispatch_ids: tuple[UUID, ...] = ()
    status: RunStatus
    vitality: Vitality
    error_family: ErrorFamily | None = None
    error_code: str | None = None
    error_message: str | None = None
    abort_reason: str | None = None
    summary: str | None = None
    final_text: str | None = None
    would_send_to: SendTarget | None = None
    provider: str
    model: str
    tokens_in: Int64
    tokens_out: Int64
    cache_read_tokens: Int64 = 0
    cache_write_tokens: Int64 = 0
    cost_micro_usd: Int64
    latency_ms: Int64
    steps: Int32
    tool_calls: Int32 = 0
    actions_executed: tuple[Action, ...] = ()
    actions_proposed: tuple[Action, ...] = ()
    dry_run: bool = False
    started_at: Timestamp
    completed_at: Timestamp


class HandoffTriggered(Record):
    """``handoff_triggered``: a run handed the conversation to humans."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    contact_id: UUID
    channel_session_id: UUID
    run_id: UUID
    agent_id: UUID
    version_id: UUID
    reason: str
    urgency: Urgency
    trigger: HandoffTrigger
    matched_keyword: str | None = None
    dry_run: bool = False


class HumanMessageRequested(Record):
    """``human_messages``: a person wrote to the customer from Switchboard; the notifier sends it."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    channel_session_id: UUID
    chat_id: str
    message_id: UUID
    sent_by_user_id: UUID | None = None


class AgentPublished(Record):
    """``published``: the latest state of an agent (compacted, keyed by agent_id)."""

    org_id: UUID
    request_id: str | None = None
    agent_id: UUID
    change: PublishedChange
    version: AgentVersionSnapshot | None = None
    previous_version_id: UUID | None = None
    changed_by_user_id: UUID | None = None


class Insight(Record):
    """``insights``: an insight or proposed action for the Home digest (keyed by org)."""

    org_id: UUID
    request_id: str | None = None
    insight_id: UUID
    insight_key: str
    insight_date: date
    kind: InsightKind
    area: str
    title: str
    body: str
    status: InsightStatus = InsightStatus.NEW
    suggested_actions: tuple[SuggestedAction, ...] = ()
    proposed_action: Action | None = None
    agent_id: UUID | None = None
    run_id: UUID | None = None
    conversation_id: UUID | None = None


class SteeringMessage(Record):
    """``steering``: a message for an active run, consumed at its next turn boundary."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    run_id: UUID
    kind: SteeringKind
    text: str
    source_message: InboundMessage | None = None


class DeadLetter(Record):
    """Dead-letter topic: a record that could not be decoded or processed, byte for byte."""

    org_id: UUID | None = None
    original_topic: str
    original_partition: Int32
    original_offset: Int64
    original_timestamp: Timestamp | None = None
    original_key: bytes | None = None
    original_value: bytes | None = None
    original_headers: tuple[Header, ...] = ()
    error_code: str
    error_message: str
    failed_at: Timestamp
    service: str
    consumer_group: str | None = None
    attempts: Int32


class RunHeartbeat(Record):
    """``run_heartbeats``: the runner still holds an active run (extends its lease)."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    run_id: UUID
    agent_id: UUID
    attempt: Int32 = 1
    runner_id: str
    steps: Int32 = 0
    dry_run: bool = False


class DispatcherTick(Record):
    """``dispatcher_ticks``: internal wake-up of one conversation (lease expiry, deferred dispatch due)."""

    org_id: UUID
    conversation_id: UUID
    due_at: Timestamp
    worker_id: str


class DispatchDecided(Record):
    """``dispatch_decisions``: what the dispatcher decided about a dispatch or a run, and why."""

    org_id: UUID
    request_id: str | None = None
    conversation_id: UUID
    dispatch_event_id: UUID
    outcome: DispatchOutcome
    message_ids: tuple[UUID, ...] = ()
    dispatch_ids: tuple[UUID, ...] = ()
    agent_id: UUID | None = None
    version_id: UUID | None = None
    run_id: UUID | None = None
    attempt: Int32 | None = None
    parent_run_id: UUID | None = None
    wake_reason: WakeReason
    dry_run: bool = False
    reason: str | None = None
    not_before: Timestamp | None = None
    details_json: str = "{}"
