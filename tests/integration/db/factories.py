"""Plain row factories for the database tests: one builder per tenant table.

A *builder* ``build_<table>(session, org_id)`` creates (and flushes) whatever
the row depends on, then returns the row itself **unsaved**. That split lets
the RLS tests create the dependencies of org B as the owner, and then try to
insert only the row under test as the application role scoped to org A.

``create_<thing>`` helpers add and flush the built row, for ordinary tests.
Every call uses fresh unique values, so tests never collide.

``ROW_BUILDERS`` must cover every tenant table (a test checks it), so a new
tenant table cannot ship without an isolation test.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import inspect
from sqlalchemy.orm import Session

from switchboard.db.base import Base
from switchboard.db.models import (
    AgentDecision,
    AgentSkill,
    AgentUsageMonthly,
    AiAgent,
    AiAgentRun,
    AiAgentVersion,
    AiProviderCredential,
    AnalysisClaim,
    ApiToken,
    AuditLogEntry,
    BudgetIncident,
    BudgetPolicy,
    ChannelSession,
    Contact,
    Conversation,
    ConversationGoal,
    ConversationModeRow,
    DispatchDecision,
    Membership,
    Message,
    Organization,
    ScheduledFollowup,
    UsageEntry,
    User,
    WorkspaceActionAutonomy,
    WorkspaceAutonomy,
    WorkspaceDailyBrief,
    WorkspaceHomePrefs,
    WorkspaceInsight,
    WorkspaceTokenUsage,
)
from switchboard.db.models.brief import BriefFact, WorkspaceTodo
from switchboard.db.models.memory import ConversationStateNote, ConversationSummary, MemoryFact
from switchboard.db.models.notifications import OrgNotification, OrgWebhook, RunDelivery

Builder = Callable[[Session, uuid.UUID], Base]
T = TypeVar("T", bound=Base)


def _hex(n: int = 8) -> str:
    return uuid.uuid4().hex[:n]


def _digits(n: int = 11) -> str:
    return "".join(str(b % 10) for b in os.urandom(n))


def _saved(session: Session, row: T) -> T:
    session.add(row)
    session.flush()
    return row


def row_values(row: Base) -> dict[str, Any]:
    """The column values explicitly set on an unsaved row (for a Core INSERT)."""
    state = inspect(row)
    mapper = state.mapper
    values: dict[str, Any] = {}
    for prop in mapper.column_attrs:
        if prop.key in state.dict:
            values[prop.columns[0].name] = state.dict[prop.key]
    return values


# --- global rows (no org) ---------------------------------------------------


def create_user(session: Session, *, email: str | None = None) -> User:
    return _saved(session, User(email=email or f"user-{_hex()}@example.test", display_name="Test User"))


# --- builders, one per tenant table ------------------------------------------


def build_organizations(session: Session, org_id: uuid.UUID) -> Organization:
    return Organization(id=org_id, name=f"Org {org_id.hex[:6]}", slug=f"org-{org_id.hex[:12]}")


def build_memberships(session: Session, org_id: uuid.UUID) -> Membership:
    user = create_user(session)
    return Membership(org_id=org_id, user_id=user.id, role="admin")


def build_api_tokens(session: Session, org_id: uuid.UUID) -> ApiToken:
    token = f"sbk_{uuid.uuid4().hex}"
    return ApiToken(
        org_id=org_id,
        name="ci token",
        token_prefix=token[:8],
        token_hash=hashlib.sha256(token.encode()).digest(),
        role="manager",
    )


def build_channel_sessions(session: Session, org_id: uuid.UUID) -> ChannelSession:
    return ChannelSession(
        org_id=org_id,
        external_session=f"session-{_hex(12)}",
        label="Main number",
        phone_number=f"+55{_digits(11)}",
        status="working",
        routes_by_name=True,
    )


def build_contacts(session: Session, org_id: uuid.UUID) -> Contact:
    return Contact(org_id=org_id, external_id=f"{_digits(13)}@c.us", display_name="Cliente Teste")


def build_conversations(session: Session, org_id: uuid.UUID) -> Conversation:
    channel = create_channel_session(session, org_id)
    contact = _saved(session, build_contacts(session, org_id))
    return Conversation(
        org_id=org_id,
        channel_session_id=channel.id,
        contact_id=contact.id,
        chat_id=contact.external_id,
    )


def build_messages(session: Session, org_id: uuid.UUID) -> Message:
    conversation = create_conversation(session, org_id)
    return Message(
        org_id=org_id,
        conversation_id=conversation.id,
        channel_session_id=conversation.channel_session_id,
        direction="inbound",
        sender="contact",
        external_id=f"wamid.{_hex(16)}",
        body="Oi, quanto custa o produto X?",
    )


def build_ai_agents(session: Session, org_id: uuid.UUID) -> AiAgent:
    return AiAgent(org_id=org_id, name=f"Agent {_hex(4)}", priority=10)


def build_ai_agent_versions(session: Session, org_id: uuid.UUID) -> AiAgentVersion:
    agent = create_agent(session, org_id)
    channel = create_channel_session(session, org_id)
    return AiAgentVersion(
        org_id=org_id,
        agent_id=agent.id,
        version_number=1,
        system_prompt="You are a helpful sales assistant.",
        provider="anthropic",
        model="claude-sonnet-4-6",
        channel_session_id=channel.id,
    )


def build_ai_provider_credentials(session: Session, org_id: uuid.UUID) -> AiProviderCredential:
    return AiProviderCredential(
        org_id=org_id,
        provider="anthropic",
        label=f"Production {_hex(4)}",
        ciphertext=os.urandom(48),
        iv=os.urandom(12),
        tag=os.urandom(16),
        key_id="k1",
        last4="abcd",
    )


def build_ai_agent_runs(session: Session, org_id: uuid.UUID) -> AiAgentRun:
    version = create_agent_version(session, org_id)
    conversation = create_conversation(session, org_id)
    return AiAgentRun(
        org_id=org_id,
        agent_id=version.agent_id,
        agent_version_id=version.id,
        conversation_id=conversation.id,
        channel_session_id=conversation.channel_session_id,
        status="completed",
    )


def build_dispatch_decisions(session: Session, org_id: uuid.UUID) -> DispatchDecision:
    return DispatchDecision(org_id=org_id, dispatch_event_id=uuid.uuid4(), outcome="no_match")


def build_workspace_token_usage(session: Session, org_id: uuid.UUID) -> WorkspaceTokenUsage:
    return WorkspaceTokenUsage(org_id=org_id, month=date(2026, 1, 1), input_tokens=10, output_tokens=5)


def build_agent_usage_monthly(session: Session, org_id: uuid.UUID) -> AgentUsageMonthly:
    agent = create_agent(session, org_id)
    return AgentUsageMonthly(org_id=org_id, agent_id=agent.id, month=date(2026, 1, 1), input_tokens=1)


def build_usage_entries(session: Session, org_id: uuid.UUID) -> UsageEntry:
    agent = create_agent(session, org_id)
    return UsageEntry(
        org_id=org_id,
        agent_id=agent.id,
        month=date(2026, 1, 1),
        input_tokens=3,
        output_tokens=2,
        cost_micros=1,
        run_count=1,
    )


def build_agent_decisions(session: Session, org_id: uuid.UUID) -> AgentDecision:
    return AgentDecision(
        org_id=org_id,
        area="booking",
        action_type="send_reminder",
        proposed_action={"tool": "send_reminder", "args": {"booking": "b1"}},
        autonomy_tier="propose",
    )


def build_workspace_autonomy(session: Session, org_id: uuid.UUID) -> WorkspaceAutonomy:
    return WorkspaceAutonomy(org_id=org_id, area=f"area_{_hex(6)}", mode="propose")


def build_workspace_action_autonomy(session: Session, org_id: uuid.UUID) -> WorkspaceActionAutonomy:
    return WorkspaceActionAutonomy(org_id=org_id, action_type=f"action_{_hex(6)}", mode="auto")


def build_workspace_insights(session: Session, org_id: uuid.UUID) -> WorkspaceInsight:
    return WorkspaceInsight(org_id=org_id, dedupe_key=f"insight:{_hex()}", area="crm", title="3 leads went cold")


def build_workspace_home_prefs(session: Session, org_id: uuid.UUID) -> WorkspaceHomePrefs:
    return WorkspaceHomePrefs(org_id=org_id, pinned_sections=["todo", "done"])


def build_workspace_daily_briefs(session: Session, org_id: uuid.UUID) -> WorkspaceDailyBrief:
    return WorkspaceDailyBrief(org_id=org_id, day=date(2026, 1, 2), digest={"pulse": "2 runs", "done": [], "todo": []})


def build_budget_policies(session: Session, org_id: uuid.UUID) -> BudgetPolicy:
    return BudgetPolicy(org_id=org_id, scope="organization", cost_limit_micros=50_000_000)


def build_budget_incidents(session: Session, org_id: uuid.UUID) -> BudgetIncident:
    return BudgetIncident(
        org_id=org_id,
        scope="organization",
        severity="warning",
        period_month=date(2026, 1, 1),
        spent_micros=40_000_000,
        limit_micros=50_000_000,
    )


def build_scheduled_followups(session: Session, org_id: uuid.UUID) -> ScheduledFollowup:
    conversation = create_conversation(session, org_id)
    return ScheduledFollowup(
        org_id=org_id,
        conversation_id=conversation.id,
        due_at=datetime.now(UTC) + timedelta(days=1),
        reason="Customer asked to be called back tomorrow",
    )


def build_audit_log(session: Session, org_id: uuid.UUID) -> AuditLogEntry:
    return AuditLogEntry(
        org_id=org_id,
        action="ai_agent.published",
        target_type="ai_agent",
        target_id=str(uuid.uuid4()),
        details={"version_number": 2},
        request_id=f"req-{_hex()}",
    )


def build_run_deliveries(session: Session, org_id: uuid.UUID) -> RunDelivery:
    run = _saved(session, build_ai_agent_runs(session, org_id))
    assert run.conversation_id is not None and run.channel_session_id is not None
    message = create_message(
        session,
        org_id,
        conversation_id=run.conversation_id,
        channel_session_id=run.channel_session_id,
        direction="outbound",
        sender="agent",
        external_id=None,
        delivery_status="pending",
        run_id=run.id,
    )
    return RunDelivery(org_id=org_id, run_id=run.id, message_id=message.id, kind="reply", channel="waha")


def build_org_webhooks(session: Session, org_id: uuid.UUID) -> OrgWebhook:
    return OrgWebhook(
        org_id=org_id,
        url="https://hooks.example.com/switchboard",
        secret_ciphertext=os.urandom(48),
        secret_iv=os.urandom(12),
        secret_tag=os.urandom(16),
        secret_key_id="k1",
    )


def build_org_notifications(session: Session, org_id: uuid.UUID) -> OrgNotification:
    return OrgNotification(
        org_id=org_id, dedupe_key=f"handoff:{uuid.uuid4()}", event_type="conversation.handoff", event_id=uuid.uuid4()
    )


def build_brief_facts(session: Session, org_id: uuid.UUID) -> BriefFact:
    return BriefFact(
        org_id=org_id,
        kind="run",
        fact_key=str(uuid.uuid4()),
        day=date(2026, 1, 2),
        occurred_at=datetime.now(UTC),
        payload={"cost_micros": 1200, "replied": True},
    )


def build_workspace_todos(session: Session, org_id: uuid.UUID) -> WorkspaceTodo:
    conversation = create_conversation(session, org_id)
    return WorkspaceTodo(org_id=org_id, text="Call the supplier", source="api", conversation_id=conversation.id)


def build_conversation_state_notes(session: Session, org_id: uuid.UUID) -> ConversationStateNote:
    conversation = create_conversation(session, org_id)
    return ConversationStateNote(org_id=org_id, conversation_id=conversation.id, note="Wants the blue sofa.")


def build_conversation_summaries(session: Session, org_id: uuid.UUID) -> ConversationSummary:
    conversation = create_conversation(session, org_id)
    return ConversationSummary(
        org_id=org_id,
        conversation_id=conversation.id,
        summary="The customer asked for the price list twice.",
        through_occurred_at=datetime.now(UTC),
        through_message_id=uuid.uuid4(),
        messages_covered=40,
        provider="demo",
        model="demo",
    )


def build_memory_facts(session: Session, org_id: uuid.UUID) -> MemoryFact:
    contact = _saved(session, build_contacts(session, org_id))
    return MemoryFact(
        org_id=org_id,
        scope="contact",
        contact_id=contact.id,
        fact="Prefers deliveries on Saturday mornings",
        fact_key=_hex(),
        source="api",
    )


def build_conversation_modes(session: Session, org_id: uuid.UUID) -> ConversationModeRow:
    conversation = create_conversation(session, org_id)
    return ConversationModeRow(org_id=org_id, conversation_id=conversation.id, mode="plan")


def build_conversation_goals(session: Session, org_id: uuid.UUID) -> ConversationGoal:
    conversation = create_conversation(session, org_id)
    version = create_agent_version(session, org_id)
    return ConversationGoal(
        org_id=org_id,
        conversation_id=conversation.id,
        agent_id=version.agent_id,
        version_id=version.id,
        kind="goal",
        goal="Answer every open lead",
        budget_micros=50_000_000,
        segment_budget_micros=5_000_000,
        started_by_run_id=uuid.uuid4(),
    )


def build_agent_skills(session: Session, org_id: uuid.UUID) -> AgentSkill:
    return AgentSkill(org_id=org_id, name=f"pricing-{_hex()[:6]}", body="Quote from the price list only.")


def build_analysis_claims(session: Session, org_id: uuid.UUID) -> AnalysisClaim:
    conversation = create_conversation(session, org_id)
    return AnalysisClaim(org_id=org_id, day=date(2026, 11, 20), conversation_id=conversation.id, agents_dispatched=1)


ROW_BUILDERS: dict[str, Builder] = {
    "organizations": build_organizations,
    "memberships": build_memberships,
    "api_tokens": build_api_tokens,
    "channel_sessions": build_channel_sessions,
    "contacts": build_contacts,
    "conversations": build_conversations,
    "messages": build_messages,
    "ai_agents": build_ai_agents,
    "ai_agent_versions": build_ai_agent_versions,
    "ai_provider_credentials": build_ai_provider_credentials,
    "ai_agent_runs": build_ai_agent_runs,
    "dispatch_decisions": build_dispatch_decisions,
    "workspace_token_usage": build_workspace_token_usage,
    "agent_usage_monthly": build_agent_usage_monthly,
    "usage_entries": build_usage_entries,
    "agent_decisions": build_agent_decisions,
    "workspace_autonomy": build_workspace_autonomy,
    "workspace_action_autonomy": build_workspace_action_autonomy,
    "workspace_insights": build_workspace_insights,
    "workspace_home_prefs": build_workspace_home_prefs,
    "workspace_daily_briefs": build_workspace_daily_briefs,
    "budget_policies": build_budget_policies,
    "budget_incidents": build_budget_incidents,
    "scheduled_followups": build_scheduled_followups,
    "audit_log": build_audit_log,
    "run_deliveries": build_run_deliveries,
    "org_webhooks": build_org_webhooks,
    "org_notifications": build_org_notifications,
    "brief_facts": build_brief_facts,
    "workspace_todos": build_workspace_todos,
    "conversation_summaries": build_conversation_summaries,
    "memory_facts": build_memory_facts,
    "conversation_modes": build_conversation_modes,
    "conversation_goals": build_conversation_goals,
    "agent_skills": build_agent_skills,
    "analysis_claims": build_analysis_claims,
    "conversation_state_notes": build_conversation_state_notes,
}


# --- create_* helpers ----------------------------------------------------------


def create_org(session: Session, org_id: uuid.UUID | None = None) -> Organization:
    """The organization row; the session's transaction must be scoped to ``org_id``."""
    return _saved(session, build_organizations(session, org_id or uuid.uuid4()))


def create_row(session: Session, table: str, org_id: uuid.UUID) -> Base:
    """Build and save one row of ``table`` for ``org_id`` (plus its dependencies)."""
    return _saved(session, ROW_BUILDERS[table](session, org_id))


def create_channel_session(session: Session, org_id: uuid.UUID) -> ChannelSession:
    return _saved(session, build_channel_sessions(session, org_id))


def create_conversation(session: Session, org_id: uuid.UUID) -> Conversation:
    return _saved(session, build_conversations(session, org_id))


def create_message(session: Session, org_id: uuid.UUID, **overrides: Any) -> Message:
    row = build_messages(session, org_id)
    for key, value in overrides.items():
        setattr(row, key, value)
    return _saved(session, row)


def create_agent(session: Session, org_id: uuid.UUID) -> AiAgent:
    return _saved(session, build_ai_agents(session, org_id))


def create_agent_version(session: Session, org_id: uuid.UUID) -> AiAgentVersion:
    return _saved(session, build_ai_agent_versions(session, org_id))


def create_run(
    session: Session,
    org_id: uuid.UUID,
    *,
    version: AiAgentVersion,
    conversation: Conversation | None,
    status: str = "running",
    is_dry_run: bool = False,
) -> AiAgentRun:
    return _saved(
        session,
        AiAgentRun(
            org_id=org_id,
            agent_id=version.agent_id,
            agent_version_id=version.id,
            conversation_id=conversation.id if conversation else None,
            status=status,
            is_dry_run=is_dry_run,
        ),
    )
