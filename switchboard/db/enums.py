"""The closed vocabularies of the schema, declared once.

Each enum backs a ``text`` column guarded by a CHECK constraint generated from
these values (see ``base.check_in``), so Python and PostgreSQL cannot drift
apart: the unit tests compare both, and adding a value is a one-line change
plus a migration that swaps the CHECK - no ``ALTER TYPE`` dance.
"""

from __future__ import annotations

from enum import StrEnum

# The vocabularies that also travel on Kafka are declared once, in the contracts,
# and re-exported here so the database and the events can never disagree.
from switchboard.contracts.enums import (
    AgentVersionStatus,
    ConcurrencyPolicy,
    DispatchOutcome,
    ErrorFamily,
    InsightKind,
    InsightStatus,
    MessageContentType,
    RunStatus,
    WakeReason,
)
from switchboard.contracts.enums import Vitality as RunVitality

__all__ = [
    "AgentVersionStatus",
    "ConcurrencyPolicy",
    "DispatchOutcome",
    "ErrorFamily",
    "InsightKind",
    "InsightStatus",
    "MessageContentType",
    "RunStatus",
    "RunVitality",
    "WakeReason",
]


class ApiTokenKind(StrEnum):
    """How a bearer token came to be: a login session, or minted for automation."""

    API = "api"
    SESSION = "session"


class Role(StrEnum):
    """A member's role in an organization; ordered viewer < manager < admin."""

    VIEWER = "viewer"
    MANAGER = "manager"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self]

    def at_least(self, other: Role) -> bool:
        """True when this role grants everything ``other`` grants."""
        return self.rank >= other.rank


_ROLE_RANK = {Role.VIEWER: 0, Role.MANAGER: 1, Role.ADMIN: 2}


class ChannelProvider(StrEnum):
    WAHA = "waha"


class ChannelSessionStatus(StrEnum):
    """WAHA session states; only ``working`` sessions can be bound at publish time."""

    STARTING = "starting"
    SCAN_QR = "scan_qr"
    WORKING = "working"
    STOPPED = "stopped"
    FAILED = "failed"


class ConversationStatus(StrEnum):
    OPEN = "open"
    HANDOFF = "handoff"
    CLOSED = "closed"


class MessageDirection(StrEnum):
    INBOUND = "inbound"
    OUTBOUND = "outbound"


class MessageSender(StrEnum):
    CONTACT = "contact"
    AGENT = "agent"
    HUMAN = "human"
    SYSTEM = "system"


class MessageDeliveryStatus(StrEnum):
    """Inbound rows are ``received``; outbound rows go pending -> sent -> delivered/read or failed."""

    RECEIVED = "received"
    PENDING = "pending"
    SENT = "sent"
    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"
    # The send's outcome is unknown: an attempt may have reached the channel, so it is never
    # sent again (a stop or crash cut it short; revision 0031). A receipt still advances it.
    UNKNOWN = "unknown"


class LlmProvider(StrEnum):
    """Model providers; ``demo`` is the clearly labeled built-in demo model (no key needed)."""

    ANTHROPIC = "anthropic"
    OPENAI = "openai"
    GOOGLE = "google"
    DEMO = "demo"


# Providers that take a bring-your-own key (the demo model never does).
CREDENTIAL_PROVIDERS: tuple[LlmProvider, ...] = (
    LlmProvider.ANTHROPIC,
    LlmProvider.OPENAI,
    LlmProvider.GOOGLE,
)


class CredentialValidation(StrEnum):
    """Outcome of the background check of a BYO key against its provider."""

    PENDING = "pending"
    VALID = "valid"
    INVALID = "invalid"
    ERROR = "error"


class AgentKind(StrEnum):
    RAG_BOT = "rag_bot"
    MCP_AGENT = "mcp_agent"


class AgentPauseReason(StrEnum):
    MANUAL = "manual"
    BUDGET_EXHAUSTED = "budget_exhausted"


# Statuses that hold the conversation: at most one such non-dry run per conversation.
ACTIVE_RUN_STATUSES: tuple[RunStatus, ...] = (RunStatus.PENDING, RunStatus.RUNNING)

# A run parked until the owner decides on the write it proposed (docs/autonomy.md). Database only:
# ``run_completed`` announced it ``aborted`` / ``awaiting_approval``; it holds neither a runner
# slot nor the conversation.
AWAITING_APPROVAL = "awaiting_approval"


class RunRowStatus(StrEnum):
    """A run row's status as the API shows and filters it: the contract's statuses plus the parked one."""

    PENDING = RunStatus.PENDING.value
    RUNNING = RunStatus.RUNNING.value
    COMPLETED = RunStatus.COMPLETED.value
    FAILED = RunStatus.FAILED.value
    ABORTED = RunStatus.ABORTED.value
    HANDOFF = RunStatus.HANDOFF.value
    AWAITING_APPROVAL = AWAITING_APPROVAL


RUN_ROW_STATUSES: tuple[str, ...] = tuple(s.value for s in RunRowStatus)


class AutonomyMode(StrEnum):
    OFF = "off"
    PROPOSE = "propose"
    AUTO = "auto"


class DecisionStatus(StrEnum):
    PROPOSED = "proposed"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXECUTED = "executed"


class InsightSeverity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


# Statuses a re-run of the analysis must never overwrite.
STICKY_INSIGHT_STATUSES: tuple[InsightStatus, ...] = (
    InsightStatus.SEEN,
    InsightStatus.DISMISSED,
    InsightStatus.ACTIONED,
)


class BudgetScope(StrEnum):
    ORGANIZATION = "organization"
    AGENT = "agent"


class BudgetAction(StrEnum):
    """What exhausting a budget does: org caps block dispatch, agent caps pause the agent."""

    NOTIFY = "notify"
    BLOCK_DISPATCH = "block_dispatch"
    PAUSE_AGENT = "pause_agent"


class IncidentSeverity(StrEnum):
    WARNING = "warning"
    HARD = "hard"


class FollowupStatus(StrEnum):
    SCHEDULED = "scheduled"
    FIRED = "fired"
    CANCELLED = "cancelled"
    FAILED = "failed"


class ActorKind(StrEnum):
    """Who performed an audited action."""

    USER = "user"
    API_TOKEN = "api_token"
    AGENT = "agent"
    SYSTEM = "system"
