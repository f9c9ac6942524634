"""All Switchboard models, one module per domain. Importing this package registers
every table on ``Base.metadata`` (Alembic and the tenancy registry rely on that)."""

from switchboard.db.base import Base
from switchboard.db.models.agents import AiAgent, AiAgentVersion, AiModel, AiProviderCredential
from switchboard.db.models.analysis import AnalysisClaim
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.autonomy import (
    AgentDecision,
    AgentUsageMonthly,
    UsageEntry,
    WorkspaceActionAutonomy,
    WorkspaceAutonomy,
    WorkspaceDailyBrief,
    WorkspaceHomePrefs,
    WorkspaceInsight,
    WorkspaceTokenUsage,
)
from switchboard.db.models.brief import BriefFact, WorkspaceTodo
from switchboard.db.models.budgets import BudgetIncident, BudgetPolicy
from switchboard.db.models.channels import ChannelSession, Contact, Conversation, Message
from switchboard.db.models.followups import ScheduledFollowup
from switchboard.db.models.limits import DispatchRateWindow, LoginFailure
from switchboard.db.models.memory import ConversationStateNote, ConversationSummary, MemoryFact
from switchboard.db.models.notifications import OrgNotification, OrgWebhook, RunDelivery
from switchboard.db.models.outbox import OutboxEvent
from switchboard.db.models.runs import ONE_ACTIVE_RUN_INDEX, AiAgentRun, DispatchDecision
from switchboard.db.models.slash import AgentSkill, ConversationGoal, ConversationModeRow
from switchboard.db.models.tenancy import ApiToken, Membership, Organization, User

__all__ = [
    "ONE_ACTIVE_RUN_INDEX",
    "AgentDecision",
    "AgentSkill",
    "AgentUsageMonthly",
    "AiAgent",
    "AiAgentRun",
    "AiAgentVersion",
    "AiModel",
    "AiProviderCredential",
    "AnalysisClaim",
    "ApiToken",
    "AuditLogEntry",
    "Base",
    "BriefFact",
    "BudgetIncident",
    "BudgetPolicy",
    "ChannelSession",
    "Contact",
    "Conversation",
    "ConversationGoal",
    "ConversationModeRow",
    "ConversationStateNote",
    "ConversationSummary",
    "DispatchDecision",
    "DispatchRateWindow",
    "LoginFailure",
    "Membership",
    "MemoryFact",
    "Message",
    "OrgNotification",
    "OrgWebhook",
    "Organization",
    "OutboxEvent",
    "RunDelivery",
    "ScheduledFollowup",
    "UsageEntry",
    "User",
    "WorkspaceActionAutonomy",
    "WorkspaceAutonomy",
    "WorkspaceDailyBrief",
    "WorkspaceHomePrefs",
    "WorkspaceInsight",
    "WorkspaceTodo",
    "WorkspaceTokenUsage",
]
