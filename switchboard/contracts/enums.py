"""Python mirrors of the Avro enums in ``schemas/*.avsc``.

Values are the Avro symbols, byte for byte; member names are Python style. A unit test
compares every enum here with its schema, so a symbol added on one side only fails CI.
Which enums carry an Avro ``default`` (and why) is explained in each schema's ``doc`` and
in docs/contracts.md.
"""

from __future__ import annotations

from enum import StrEnum


class WakeReason(StrEnum):
    """Why an agent is woken (no Avro default: a reader must never guess a reason)."""

    USER_MESSAGE = "userMessage"
    ASSIGNMENT = "assignment"
    PIPELINE_STEP = "pipelineStep"
    CHILD_COMPLETED = "childCompleted"
    FOLLOW_UP = "followUp"
    RECOVERY = "recovery"


class RunStatus(StrEnum):
    """Coarse life-cycle state of a run; ``completed`` never means "reply delivered"."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"
    HANDOFF = "handoff"


class Vitality(StrEnum):
    """Finer reading of how a run went."""

    ALIVE = "alive"
    PRODUCTIVE = "productive"
    COMPLETED = "completed"
    BLOCKED = "blocked"
    EMPTY = "empty"
    LOOPING = "looping"
    FAILED = "failed"
    STALLED = "stalled"
    DEAD = "dead"


class ErrorFamily(StrEnum):
    """Failures grouped the way operators act on them."""

    TRANSIENT_UPSTREAM = "transientUpstream"
    BUDGET_EXCEEDED = "budgetExceeded"
    PROCESS_LOST = "processLost"
    SILENT_RUN = "silentRun"
    TOOL_FAILURE = "toolFailure"
    UNKNOWN = "unknown"


class RunEventType(StrEnum):
    """Kind of a streamed run event; says which payload of ``RunEvent`` is set."""

    THINKING = "thinking"
    TEXT = "text"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    USAGE = "usage"
    ERROR = "error"
    DEBUG = "debug"
    DONE = "done"


class HandoffTrigger(StrEnum):
    """What handed the conversation to a human."""

    KEYWORD = "keyword"
    TOOL = "tool"


class Urgency(StrEnum):
    """How soon a human should take over."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    URGENT = "urgent"


class InsightKind(StrEnum):
    """An observation, or an action waiting for the owner's approval."""

    INSIGHT = "insight"
    PROPOSED_ACTION = "proposed_action"


class InsightStatus(StrEnum):
    """Where the owner is with an insight."""

    NEW = "new"
    SEEN = "seen"
    DISMISSED = "dismissed"
    ACTIONED = "actioned"


class PublishedChange(StrEnum):
    """What happened to an agent on the ``published`` topic."""

    PUBLISHED = "published"
    PAUSED = "paused"
    ARCHIVED = "archived"


class SteeringKind(StrEnum):
    """Guidance for the next turn, or a request to stop at the next turn boundary."""

    GUIDANCE = "guidance"
    INTERRUPT = "interrupt"


class ConcurrencyPolicy(StrEnum):
    """What the dispatcher does with a message for a busy conversation."""

    ENQUEUE = "enqueue"
    STEER = "steer"
    INTERRUPT = "interrupt"
    REJECT = "reject"


class DispatchOutcome(StrEnum):
    """What the dispatcher decided about a dispatch request or a run it holds (no Avro default)."""

    DISPATCHED = "dispatched"
    NO_MATCH = "no_match"
    CONV_BUSY = "conv_busy"
    BUDGET_EXCEEDED = "budget_exceeded"
    RATE_LIMITED = "rate_limited"
    QUEUED = "queued"
    STEERED = "steered"
    INTERRUPTED = "interrupted"
    RECOVERED = "recovered"
    LOST = "lost"


class AgentVersionStatus(StrEnum):
    """Life-cycle state of an agent version."""

    DRAFT = "draft"
    PUBLISHED = "published"
    SUPERSEDED = "superseded"
    ARCHIVED = "archived"


class MessageContentType(StrEnum):
    """What a customer message is: text, or the kind of attachment (its caption is the text)."""

    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    DOCUMENT = "document"
    LOCATION = "location"
    OTHER = "other"


class Weekday(StrEnum):
    """Day of the week of a business-hours window."""

    MONDAY = "monday"
    TUESDAY = "tuesday"
    WEDNESDAY = "wednesday"
    THURSDAY = "thursday"
    FRIDAY = "friday"
    SATURDAY = "saturday"
    SUNDAY = "sunday"
