"""Request and response bodies of the agents and versions endpoints [004 §4.3-4.5].

The version configuration travels in one shape everywhere: the API body, the
``trigger_config``/``followup`` JSON stored on ``ai_agent_versions`` and the
``published`` snapshot (``switchboard.contracts.TriggerConfig``) share field names,
so nothing is renamed between the edge and the dispatcher. Money is in cents at
this edge (``cost_budget_cents``, as in the seed) and micro-USD in the database.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)

from switchboard.contracts.enums import Weekday
from switchboard.db.enums import AgentKind, AgentVersionStatus, ConcurrencyPolicy, LlmProvider
from switchboard.keyword_patterns import KeywordPatternError, check_keyword
from switchboard.time_zones import check_time_zone

# [004 D4]: the deterministic handoff sentinel's defaults.
DEFAULT_HANDOFF_KEYWORDS: tuple[str, ...] = ("falar com humano", "atendente", "pessoa real")
MAX_KEYWORD_REGEX_LENGTH = 500
MINUTES_PER_DAY = 1440
MICROS_PER_CENT = 10_000

Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
EventType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.]{0,63}$")]
Keyword = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
# The runner's classification labels (services/runner/classification.py; urgency is the contracts' Urgency).
IntentLabel = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_]{0,79}$")]
UrgencyLabel = Literal["low", "normal", "high", "urgent"]
CategoryLabel = Literal["sales", "support", "billing", "scheduling", "complaint", "information", "other"]
ToneLabel = Literal["positive", "neutral", "negative", "angry"]


class AgentStatus(StrEnum):
    """What an agent is doing, derived from its columns (not stored)."""

    DRAFT = "draft"  # never published, nothing answering
    PUBLISHED = "published"  # a version answers
    PAUSED = "paused"  # was published, paused (manually or by a budget)
    ARCHIVED = "archived"  # soft-deleted


class _Strict(BaseModel):
    """Unknown fields are refused: a typo must be a 422, not a silently ignored setting."""

    model_config = ConfigDict(extra="forbid")


def _unique(values: list[str], what: str) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} must not repeat")
    return values


def check_keyword_regex(value: str | None) -> str | None:
    """Check at save time with the dispatcher's own compiler (``switchboard.keyword_patterns``):
    it compiles (case-insensitive, Python's syntax) and is not catastrophically slow to search."""
    if value is None:
        return None
    try:
        check_keyword(value)
    except KeywordPatternError as exc:
        raise ValueError(f"keyword_regex: {exc} ({exc.code})") from None
    return value


def normalize_trigger(data: Any) -> Any:
    """Accept the seed's nested shape too: ``{"events", "filters": {"ignore_self", ...}}`` [004 §3.2].

    Only keys that are present move, so a partial PATCH stays partial. The seed's
    ``concurrency`` key has no meaning here (see ``concurrency_policy``) and is dropped.
    """
    if not isinstance(data, dict):
        return data
    data = dict(data)
    if "events" in data and "event_types" not in data:
        data["event_types"] = data.pop("events")
    filters = data.pop("filters", None)
    if isinstance(filters, dict):
        for key, value in filters.items():
            data.setdefault("ignore_own" if key == "ignore_self" else key, value)
    elif filters is not None:
        data["filters"] = filters  # let validation report it
    data.pop("concurrency", None)
    if "ignore_self" in data and "ignore_own" not in data:
        data["ignore_own"] = data.pop("ignore_self")
    return data


class WeeklyWindowIn(_Strict):
    """An opening window on one weekday, minutes after local midnight; end exclusive."""

    weekday: Weekday
    start_minute: int = Field(ge=0, le=MINUTES_PER_DAY - 1)
    end_minute: int = Field(ge=1, le=MINUTES_PER_DAY)

    @model_validator(mode="after")
    def _ordered(self) -> WeeklyWindowIn:
        if self.end_minute <= self.start_minute:
            raise ValueError("end_minute must be after start_minute (split a window that crosses midnight)")
        return self


class BusinessHoursIn(_Strict):
    time_zone: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="IANA time zone, e.g. America/Sao_Paulo; omitted: the organization's (written into the version)",
    )
    windows: list[WeeklyWindowIn] = Field(min_length=1, max_length=70)

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return None if value is None else check_time_zone(value)

    @model_validator(mode="after")
    def _no_overlap(self) -> BusinessHoursIn:
        by_day: dict[Weekday, list[WeeklyWindowIn]] = {}
        for window in self.windows:
            by_day.setdefault(window.weekday, []).append(window)
        for day, windows in by_day.items():
            windows.sort(key=lambda w: w.start_minute)
            for before, after in itertools.pairwise(windows):
                if after.start_minute < before.end_minute:
                    raise ValueError(f"windows overlap on {day.value}")
        return self


class ClassificationFilterIn(_Strict):
    """Issue 6 item 9: the labels this agent answers; an empty list accepts any value. The runner checks it
    after classifying and passes unmet messages to the next agent (docs/agent-context.md "Classification")."""

    intent: list[IntentLabel] = Field(default_factory=list, max_length=50)
    urgency: list[UrgencyLabel] = Field(default_factory=list)
    category: list[CategoryLabel] = Field(default_factory=list)
    tone: list[ToneLabel] = Field(default_factory=list)

    @field_validator("intent", "urgency", "category", "tone")
    @classmethod
    def _labels_unique(cls, value: list[str]) -> list[str]:
        return _unique(value, "labels")

    @property
    def restricts(self) -> bool:
        return bool(self.intent or self.urgency or self.category or self.tone)


class TriggerConfigIn(_Strict):
    """Which events wake the agent [004 §5.3]. The seed's nested shape is accepted on input."""

    event_types: list[EventType] = Field(default_factory=lambda: ["message"], min_length=1, max_length=20)
    ignore_groups: bool = True
    ignore_own: bool = True
    keyword_regex: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_KEYWORD_REGEX_LENGTH,
        description="Python regular expression, matched case-insensitively; compiled at save time.",
    )
    business_hours: BusinessHoursIn | None = None
    classification: ClassificationFilterIn | None = Field(
        default=None, description="Labels this agent answers (needs classification_enabled); null = any."
    )

    @model_validator(mode="before")
    @classmethod
    def _seed_shape(cls, data: Any) -> Any:
        return normalize_trigger(data)

    @field_validator("keyword_regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        return check_keyword_regex(value)

    @field_validator("event_types")
    @classmethod
    def _events_unique(cls, value: list[str]) -> list[str]:
        return _unique(value, "event_types")


class FollowupIn(_Strict):
    """Follow-up behavior [004 §4.4]; an absent property keeps the legacy behavior (enabled)."""

    enabled: bool = True
    callback_enabled: bool = True
    flow_pointer_ids: list[Identifier] = Field(default_factory=list, max_length=100)

    @field_validator("flow_pointer_ids")
    @classmethod
    def _flows_unique(cls, value: list[str]) -> list[str]:
        return _unique(value, "flow_pointer_ids")


class VersionConfig(_Strict):
    """The full configuration of an agent version (what ``Save`` stores as a new draft)."""

    system_prompt: str = Field(min_length=1, max_length=100_000)
    persona: str | None = Field(default=None, max_length=20_000, description="Persona / team brief layer.")
    skills: list[Identifier] = Field(default_factory=list, max_length=50)
    provider: LlmProvider
    model: str = Field(min_length=1, max_length=100, description="A model of the catalog, not deprecated.")
    credential_id: uuid.UUID | None = Field(
        default=None, description="A credential of this org for the same provider; null = org default, then platform."
    )
    tool_ids: list[Identifier] = Field(default_factory=list, max_length=100)
    trigger_config: TriggerConfigIn = Field(default_factory=TriggerConfigIn)
    channel_session_id: uuid.UUID | None = Field(
        default=None, description="The WhatsApp session the agent answers on; required to publish."
    )
    max_steps: int = Field(default=10, ge=1, le=25)
    token_budget: int = Field(default=50_000, ge=1_000, le=500_000)
    cost_budget_cents: int = Field(default=50, ge=1, le=10_000)
    history_message_window: int = Field(default=20, ge=0, le=500)
    history_token_window: int = Field(default=8_000, ge=0, le=1_000_000)
    silence_timeout_minutes: int = Field(
        default=15, ge=1, le=240, description="A run with no model output or tool result for this long is aborted."
    )
    pause_on_proposal: bool = Field(
        default=False,
        description="Under `propose` autonomy, park the run at its first proposed write until the owner decides.",
    )
    # Issue 6 item 9 (docs/agent-context.md "Sub-agents and classification").
    subagent_ids: list[uuid.UUID] = Field(
        default_factory=list,
        max_length=20,
        description="Published agents of this org the version may delegate to (each a tool `agent_<name>`).",
    )
    classification_enabled: bool = Field(
        default=False, description="Label intent, urgency, category and tone of the inbound message(s) first."
    )
    handoff_keywords: list[Keyword] = Field(default_factory=lambda: list(DEFAULT_HANDOFF_KEYWORDS), max_length=50)
    handoff_tool_enabled: bool = True
    handoff_message: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="Sent to the customer once when a run hands the conversation to a person; none: nothing is sent.",
    )
    followup: FollowupIn = Field(default_factory=FollowupIn)
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.ENQUEUE

    @field_validator("tool_ids", "skills")
    @classmethod
    def _ids_unique(cls, value: list[str]) -> list[str]:
        return _unique(value, "ids")

    @field_validator("subagent_ids")
    @classmethod
    def _subagents_unique(cls, value: list[uuid.UUID]) -> list[uuid.UUID]:
        if len(set(value)) != len(value):
            raise ValueError("subagent_ids must not repeat an agent")
        return value

    @model_validator(mode="after")
    def _filter_needs_labels(self) -> VersionConfig:
        label_filter = self.trigger_config.classification
        if label_filter is not None and label_filter.restricts and not self.classification_enabled:
            raise ValueError("trigger_config.classification needs classification_enabled")
        return self

    @field_validator("handoff_keywords")
    @classmethod
    def _keywords_unique(cls, value: list[str]) -> list[str]:
        _unique([v.lower() for v in value], "handoff_keywords (case-insensitively)")
        return value


class TriggerConfigPatch(_Strict):
    """A partial trigger: only the properties sent change (see ``VersionPatch``)."""

    event_types: list[EventType] | None = None
    ignore_groups: bool | None = None
    ignore_own: bool | None = None
    keyword_regex: str | None = Field(default=None, max_length=MAX_KEYWORD_REGEX_LENGTH)
    business_hours: BusinessHoursIn | None = None
    classification: ClassificationFilterIn | None = None

    @model_validator(mode="before")
    @classmethod
    def _seed_shape(cls, data: Any) -> Any:
        return normalize_trigger(data)


class FollowupPatch(_Strict):
    enabled: bool | None = None
    callback_enabled: bool | None = None
    flow_pointer_ids: list[Identifier] | None = None


class VersionPatch(_Strict):
    """PATCH of a draft: absent properties keep their value; ``trigger_config`` and ``followup``
    merge property by property [004 §4.4]; lists and ``business_hours`` are replaced whole;
    ``null`` clears a nullable property. The merged result is validated like a full config."""

    system_prompt: str | None = None
    persona: str | None = None
    skills: list[Identifier] | None = None
    provider: LlmProvider | None = None
    model: str | None = None
    credential_id: uuid.UUID | None = None
    tool_ids: list[Identifier] | None = None
    trigger_config: TriggerConfigPatch | None = None
    channel_session_id: uuid.UUID | None = None
    max_steps: int | None = None
    token_budget: int | None = None
    cost_budget_cents: int | None = None
    history_message_window: int | None = None
    history_token_window: int | None = None
    silence_timeout_minutes: int | None = None
    pause_on_proposal: bool | None = None
    subagent_ids: list[uuid.UUID] | None = None
    classification_enabled: bool | None = None
    handoff_keywords: list[Keyword] | None = None
    handoff_tool_enabled: bool | None = None
    handoff_message: str | None = None
    followup: FollowupPatch | None = None
    concurrency_policy: ConcurrencyPolicy | None = None


class AgentCreate(_Strict):
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2_000)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000, description="Higher answers first.")
    version: VersionConfig


class AgentPatch(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2_000)
    priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)


class DuplicateRequest(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=200, description="Default: '<name> (copy)'.")


class PublishRequest(_Strict):
    version_id: uuid.UUID


class AgentView(BaseModel):
    id: uuid.UUID
    name: str
    description: str | None
    kind: AgentKind
    priority: int
    status: AgentStatus
    # The version answering now; null while draft, paused or archived.
    published_version_id: uuid.UUID | None
    # The newest draft (the one an editor continues), if any.
    latest_draft_id: uuid.UUID | None
    latest_version_number: int | None
    paused_at: datetime | None
    pause_reason: str | None
    archived_at: datetime | None
    created_by: uuid.UUID | None
    created_at: datetime
    updated_at: datetime


class TriggerConfigView(BaseModel):
    event_types: list[str]
    ignore_groups: bool
    ignore_own: bool
    keyword_regex: str | None
    business_hours: BusinessHoursIn | None
    classification: ClassificationFilterIn | None = None

    @model_serializer(mode="wrap")
    def _additive(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``classification`` appears only when set: a trigger without it reads as before."""
        data: dict[str, Any] = handler(self)
        if data.get("classification") is None:
            data.pop("classification", None)
        return data


class FollowupView(BaseModel):
    enabled: bool
    callback_enabled: bool
    flow_pointer_ids: list[str]


class VersionView(BaseModel):
    id: uuid.UUID
    agent_id: uuid.UUID
    version_number: int
    status: AgentVersionStatus
    system_prompt: str
    persona: str | None
    skills: list[str]
    provider: str
    model: str
    credential_id: uuid.UUID | None
    tool_ids: list[str]
    trigger_config: TriggerConfigView
    channel_session_id: uuid.UUID | None
    max_steps: int
    token_budget: int
    cost_budget_cents: int
    history_message_window: int
    history_token_window: int
    silence_timeout_minutes: int
    pause_on_proposal: bool
    subagent_ids: list[uuid.UUID]
    classification_enabled: bool
    handoff_keywords: list[str]
    handoff_tool_enabled: bool
    handoff_message: str | None = None
    followup: FollowupView
    concurrency_policy: ConcurrencyPolicy
    published_at: datetime | None
    superseded_at: datetime | None
    created_by: uuid.UUID | None
    created_at: datetime
    updated_at: datetime


class AgentWithVersion(BaseModel):
    agent: AgentView
    version: VersionView
