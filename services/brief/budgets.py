"""Budgets after the fact [002 "I budget, a posteriori"]: after each non-dry run, compare the
agent's month-to-date spend with its effective cap and record what it crossed.

- The spend is the agent's month in ``agent_usage_monthly`` plus its ledger entries not
  folded yet (``switchboard.db.usage.agent_month_totals``): the runner appends each run's
  usage in its finish transaction, so the run this record announces is always counted,
  and the brief only reads, never counting a run twice.
- The effective cap: the agent's enabled budget policy (cost and/or token limit, its
  ``soft_threshold_pct``), else the agent's own ``monthly_budget_micros`` with the default
  80 % threshold. No limit (NULL) means unlimited.
- Crossing the soft threshold records a ``warning`` incident, exhausting a limit a ``hard``
  one — the highest severity reached only, once per agent, month and severity (the unique
  index; ``ON CONFLICT DO NOTHING``). A new hard incident pauses the agent through
  ``switchboard.db.agent_lifecycle.pause_agent`` (outbox ``published`` record, change paused).
- Each new incident is also an insight (``workspace_insights`` + an ``insights`` record in the
  outbox, same transaction) so the notifier tells the admins and the digest lists it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from switchboard.contracts import Serde
from switchboard.contracts.enums import InsightKind, InsightStatus
from switchboard.contracts.records import Insight, RunCompleted
from switchboard.contracts.topics import Topics
from switchboard.db.agent_lifecycle import lock_agent, pause_agent
from switchboard.db.daily_brief import local_day
from switchboard.db.enums import (
    ActorKind,
    AgentPauseReason,
    BudgetAction,
    BudgetScope,
    IncidentSeverity,
    InsightSeverity,
)
from switchboard.db.insights import upsert_insight
from switchboard.db.models.agents import AiAgent
from switchboard.db.models.budgets import BudgetIncident, BudgetPolicy
from switchboard.db.models.runs import AiAgentRun
from switchboard.db.outbox import enqueue_record
from switchboard.db.usage import agent_month_totals, month_start

DEFAULT_SOFT_PCT = 80
BUDGET_AREA = "cross"
PAUSE_AUDIT_ACTION = "ai_agent.paused_by_budget"


@dataclass(frozen=True, slots=True)
class Cap:
    """An agent's effective monthly cap; a None limit is no cap on that dimension."""

    cost_micros: int | None
    tokens: int | None
    soft_pct: int
    policy_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class Spend:
    cost_micros: int
    tokens: int


def effective_cap(policy: BudgetPolicy | None, agent: AiAgent) -> Cap | None:
    """The enabled policy, else the agent's own monthly figure; None when nothing caps the agent."""
    if policy is not None and policy.enabled:
        cap = Cap(policy.cost_limit_micros or None, policy.token_limit or None, policy.soft_threshold_pct, policy.id)
    else:
        cap = Cap(agent.monthly_budget_micros or None, None, DEFAULT_SOFT_PCT, None)
    return None if cap.cost_micros is None and cap.tokens is None else cap


def severity(spend: Spend, cap: Cap) -> IncidentSeverity | None:
    """The highest severity reached on any capped dimension."""
    ratios = []
    if cap.cost_micros is not None:
        ratios.append(spend.cost_micros / cap.cost_micros)
    if cap.tokens is not None:
        ratios.append(spend.tokens / cap.tokens)
    worst = max(ratios, default=0.0)
    if worst >= 1:
        return IncidentSeverity.HARD
    if worst * 100 >= cap.soft_pct:
        return IncidentSeverity.WARNING
    return None


def insight_key(agent_id: uuid.UUID, month: date, level: IncidentSeverity) -> str:
    return f"budget_incident:{agent_id}:{month:%Y-%m}:{level.value}"


def _money(micros: int | None) -> str:
    return "unlimited" if micros is None else f"${micros / 1_000_000:.2f}"


def _texts(agent: AiAgent, level: IncidentSeverity, spend: Spend, cap: Cap, paused: bool) -> tuple[str, str]:
    figures = f"Spent {_money(spend.cost_micros)} of {_money(cap.cost_micros)}"
    if cap.tokens is not None:
        figures += f", {spend.tokens} of {cap.tokens} tokens"
    if level is IncidentSeverity.HARD:
        title = f"Budget exhausted: {agent.name}" + (" was paused" if paused else "")
        return title, f"{figures} this month. Publish the agent again to resume it."
    return f"Budget warning: {agent.name} passed {cap.soft_pct}% of its monthly budget", f"{figures} this month."


def _existing_run(session: Session, org_id: uuid.UUID, run_id: uuid.UUID) -> uuid.UUID | None:
    """The run id if the run row exists (a foreign key; a replay may outlive the row)."""
    return session.scalar(select(AiAgentRun.id).where(AiAgentRun.org_id == org_id, AiAgentRun.id == run_id))


def evaluate_run(session: Session, serde: Serde, record: RunCompleted, tz: ZoneInfo) -> Insight | None:
    """Record the incident this run's completion crossed, if new; returns its ``insights`` record."""
    org_id, agent_id = record.org_id, record.agent_id
    month = month_start(record.completed_at)
    usage = agent_month_totals(session, org_id, month, agent_id=agent_id).get(agent_id)
    agent = session.scalars(select(AiAgent).where(AiAgent.org_id == org_id, AiAgent.id == agent_id)).one_or_none()
    if usage is None or agent is None:
        return None
    policy = session.scalars(
        select(BudgetPolicy).where(
            BudgetPolicy.org_id == org_id,
            BudgetPolicy.scope == BudgetScope.AGENT.value,
            BudgetPolicy.agent_id == agent_id,
        )
    ).one_or_none()
    cap = effective_cap(policy, agent)
    if cap is None:
        return None
    spend = Spend(usage.cost_micros, usage.input_tokens + usage.output_tokens)
    level = severity(spend, cap)
    if level is None:
        return None
    if level is IncidentSeverity.HARD:
        # Lock before deciding: a concurrent publish or pause of the agent serializes with us.
        agent = lock_agent(session, org_id, agent_id) or agent
    pause = level is IncidentSeverity.HARD and agent.published_version_id is not None and agent.archived_at is None
    run_id = _existing_run(session, org_id, record.run_id)
    incident_id = session.scalar(
        insert(BudgetIncident)
        .values(
            org_id=org_id,
            scope=BudgetScope.AGENT.value,
            policy_id=cap.policy_id,
            agent_id=agent_id,
            run_id=run_id,
            severity=level.value,
            period_month=month,
            spent_micros=spend.cost_micros,
            limit_micros=cap.cost_micros,
            spent_tokens=spend.tokens,
            limit_tokens=cap.tokens,
            action_taken=(BudgetAction.PAUSE_AGENT if pause else BudgetAction.NOTIFY).value,
            details={"run_id": str(record.run_id), "soft_threshold_pct": cap.soft_pct},
        )
        .on_conflict_do_nothing()
        .returning(BudgetIncident.id)
    )
    if incident_id is None:
        return None  # already recorded this month: nothing more to do
    if pause:
        pause_agent(
            session,
            serde,
            agent,
            reason=AgentPauseReason.BUDGET_EXHAUSTED,
            audit_action=PAUSE_AUDIT_ACTION,
            actor_user_id=None,
            actor_kind=ActorKind.SYSTEM,
            request_id=record.request_id,
            details={"incident_id": str(incident_id), "run_id": str(record.run_id)},
        )
    return _publish_insight(session, serde, record, agent, level, spend, cap, pause, run_id, tz, month)


def _publish_insight(
    session: Session,
    serde: Serde,
    record: RunCompleted,
    agent: AiAgent,
    level: IncidentSeverity,
    spend: Spend,
    cap: Cap,
    paused: bool,
    run_id: uuid.UUID | None,
    tz: ZoneInfo,
    month: date,
) -> Insight:
    key = insight_key(agent.id, month, level)
    title, body = _texts(agent, level, spend, cap, paused)
    day = local_day(record.completed_at, tz)
    row = upsert_insight(
        session,
        org_id=record.org_id,
        dedupe_key=key,
        area=BUDGET_AREA,
        title=title,
        body=body,
        kind=InsightKind.INSIGHT,
        severity=InsightSeverity.CRITICAL if level is IncidentSeverity.HARD else InsightSeverity.WARNING,
        insight_date=day,
        run_id=run_id,
    )
    insight = Insight(
        org_id=record.org_id,
        request_id=record.request_id,
        insight_id=row.id,
        insight_key=key,
        insight_date=day,
        kind=InsightKind.INSIGHT,
        area=BUDGET_AREA,
        title=title,
        body=body,
        status=InsightStatus.NEW,
        agent_id=agent.id,
        run_id=record.run_id,
        conversation_id=record.conversation_id,
    )
    enqueue_record(session, Topics.INSIGHTS, insight, serde=serde)
    return insight
