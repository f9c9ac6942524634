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
  index; ``ON CONFLICT DO NOTHING``). A new hard incident applies the cap's ``hard_action``:
  ``pause_agent`` (the agent's own figure always; a policy's as set) pauses the agent through
  ``switchboard.db.agent_lifecycle.pause_agent`` (outbox ``published`` record, change paused),
  ``notify`` only tells. The cap holds for the month: an agent published again while its
  month is still over a ``pause_agent`` cap is paused again after its next run (a new insight
  each time), so republishing without raising the cap buys one run, not the rest of the month.
- The org's cap (an enabled org-scope policy) is evaluated the same way against the org's
  month, once per batch: the dispatcher already stops dispatching an org over its cap
  (``list_orgs_over_budget``), so the hard incident records ``block_dispatch`` — and this is
  what tells the owner that customers stopped getting answers, instead of silence.
- Each new incident is also an insight (``workspace_insights`` + an ``insights`` record in the
  outbox, same transaction) so the notifier tells the admins and the digest lists it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
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
from switchboard.db.usage import agent_month_totals, month_start, month_totals

DEFAULT_SOFT_PCT = 80
BUDGET_AREA = "cross"
PAUSE_AUDIT_ACTION = "ai_agent.paused_by_budget"


@dataclass(frozen=True, slots=True)
class Cap:
    """An effective monthly cap; a None limit is no cap on that dimension."""

    cost_micros: int | None
    tokens: int | None
    soft_pct: int
    policy_id: uuid.UUID | None
    # What a new hard incident does (an org cap: the dispatcher blocks, recorded as such).
    hard_action: BudgetAction = BudgetAction.PAUSE_AGENT


@dataclass(frozen=True, slots=True)
class Spend:
    cost_micros: int
    tokens: int


def effective_cap(policy: BudgetPolicy | None, agent: AiAgent) -> Cap | None:
    """The enabled policy, else the agent's own monthly figure; None when nothing caps the agent."""
    if policy is not None and policy.enabled:
        cap = Cap(
            policy.cost_limit_micros or None,
            policy.token_limit or None,
            policy.soft_threshold_pct,
            policy.id,
            BudgetAction(policy.hard_action or BudgetAction.NOTIFY),  # the column's default
        )
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


def insight_key(agent_id: uuid.UUID | None, month: date, level: IncidentSeverity) -> str:
    """``budget_incident:<agent id or "org">:<YYYY-MM>:<severity>`` (the notifier's prefix)."""
    subject = "org" if agent_id is None else str(agent_id)
    return f"budget_incident:{subject}:{month:%Y-%m}:{level.value}"


def _money(micros: int | None) -> str:
    return "unlimited" if micros is None else f"${micros / 1_000_000:.2f}"


def _figures(spend: Spend, cap: Cap) -> str:
    figures = f"Spent {_money(spend.cost_micros)} of {_money(cap.cost_micros)}"
    if cap.tokens is not None:
        figures += f", {spend.tokens} of {cap.tokens} tokens"
    return figures


RESUME_HINT = (
    "Raise its budget, then publish it again to resume it: while this month's spend is over the cap, "
    "a published agent is paused again after its next run."
)


def _texts(agent: AiAgent, level: IncidentSeverity, spend: Spend, cap: Cap, paused: bool) -> tuple[str, str]:
    figures = _figures(spend, cap)
    if level is IncidentSeverity.HARD:
        title = f"Budget exhausted: {agent.name}" + (" was paused" if paused else "")
        return title, f"{figures} this month." + (f" {RESUME_HINT}" if paused else "")
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
    # A past month's record (a replay, a brief that lagged across the month's end) says nothing
    # about now: the agent runs on this month's budget, and pausing it for October's spend in
    # December stopped an agent republished for the new month. Its incident is still recorded.
    this_month = month >= month_start(datetime.now(UTC))
    pause = (
        level is IncidentSeverity.HARD
        and this_month
        and cap.hard_action is BudgetAction.PAUSE_AGENT
        and agent.published_version_id is not None
        and agent.archived_at is None
    )
    run_id = _existing_run(session, org_id, record.run_id)
    action = BudgetAction.PAUSE_AGENT if pause else BudgetAction.NOTIFY
    incident_id = _record_incident(session, record, agent_id, run_id, level, month, spend, cap, action)
    if incident_id is None:
        if not pause:
            return None  # already recorded this month: nothing more to do
        # Recorded and paused before, yet published again while the month is still over the cap:
        # the cap holds. Paused again after this run (one run past the cap per republish, never more).
        return _pause_again(session, serde, record, agent, spend, cap, month, run_id, tz)
    if pause:
        _budget_pause(session, serde, agent, record, {"incident_id": str(incident_id)})
    title, body = _texts(agent, level, spend, cap, pause)
    note = _Note(insight_key(agent.id, month, level), title, body, level, agent.id, run_id)
    return _publish_insight(session, serde, record, note, tz)


def _pause_again(
    session: Session,
    serde: Serde,
    record: RunCompleted,
    agent: AiAgent,
    spend: Spend,
    cap: Cap,
    month: date,
    run_id: uuid.UUID | None,
    tz: ZoneInfo,
) -> Insight:
    _budget_pause(session, serde, agent, record, {"again": True})
    title = f"Budget still exhausted: {agent.name} was paused again"
    body = f"{_figures(spend, cap)} this month. {RESUME_HINT}"
    key = f"{insight_key(agent.id, month, IncidentSeverity.HARD)}:{record.run_id}"
    note = _Note(key, title, body, IncidentSeverity.HARD, agent.id, run_id)
    return _publish_insight(session, serde, record, note, tz)


def _budget_pause(
    session: Session, serde: Serde, agent: AiAgent, record: RunCompleted, details: dict[str, object]
) -> None:
    """The system pauses the agent (audited with no user, announced on ``published``)."""
    pause_agent(
        session,
        serde,
        agent,
        reason=AgentPauseReason.BUDGET_EXHAUSTED,
        audit_action=PAUSE_AUDIT_ACTION,
        actor_user_id=None,
        actor_kind=ActorKind.SYSTEM,
        request_id=record.request_id,
        details={**details, "run_id": str(record.run_id)},
    )


def _org_texts(level: IncidentSeverity, spend: Spend, cap: Cap) -> tuple[str, str]:
    figures = _figures(spend, cap)
    if level is IncidentSeverity.HARD:
        return (
            "Monthly budget exhausted: agents stopped answering",
            f"{figures} this month. No new run starts until the budget is raised or the month ends.",
        )
    return f"Budget warning: the organization passed {cap.soft_pct}% of its monthly budget", f"{figures} this month."


def evaluate_org(session: Session, serde: Serde, record: RunCompleted, tz: ZoneInfo) -> Insight | None:
    """The org's cap against the org's month after this run; the incident's ``insights`` record, if new."""
    org_id = record.org_id
    policy = session.scalars(
        select(BudgetPolicy).where(
            BudgetPolicy.org_id == org_id,
            BudgetPolicy.scope == BudgetScope.ORGANIZATION.value,
            BudgetPolicy.enabled.is_(True),
        )
    ).one_or_none()
    if policy is None or (policy.cost_limit_micros is None and policy.token_limit is None):
        return None
    cap = Cap(
        policy.cost_limit_micros, policy.token_limit, policy.soft_threshold_pct, policy.id, BudgetAction.BLOCK_DISPATCH
    )
    month = month_start(record.completed_at)
    usage = month_totals(session, org_id, month)
    if usage is None:
        return None
    spend = Spend(usage.cost_micros, usage.input_tokens + usage.output_tokens)
    level = severity(spend, cap)
    if level is None:
        return None
    run_id = _existing_run(session, org_id, record.run_id)
    action = BudgetAction.BLOCK_DISPATCH if level is IncidentSeverity.HARD else BudgetAction.NOTIFY
    incident_id = _record_incident(session, record, None, run_id, level, month, spend, cap, action)
    if incident_id is None:
        return None
    title, body = _org_texts(level, spend, cap)
    return _publish_insight(
        session, serde, record, _Note(insight_key(None, month, level), title, body, level, None, run_id), tz
    )


def _record_incident(
    session: Session,
    record: RunCompleted,
    agent_id: uuid.UUID | None,
    run_id: uuid.UUID | None,
    level: IncidentSeverity,
    month: date,
    spend: Spend,
    cap: Cap,
    action: BudgetAction,
) -> uuid.UUID | None:
    """Insert the incident of an agent (or the org: ``agent_id`` None); None when it was already recorded."""
    scope = BudgetScope.ORGANIZATION if agent_id is None else BudgetScope.AGENT
    return session.scalar(
        insert(BudgetIncident)
        .values(
            org_id=record.org_id,
            scope=scope.value,
            policy_id=cap.policy_id,
            agent_id=agent_id,
            run_id=run_id,
            severity=level.value,
            period_month=month,
            spent_micros=spend.cost_micros,
            limit_micros=cap.cost_micros,
            spent_tokens=spend.tokens,
            limit_tokens=cap.tokens,
            action_taken=action.value,
            details={"run_id": str(record.run_id), "soft_threshold_pct": cap.soft_pct},
        )
        .on_conflict_do_nothing()
        .returning(BudgetIncident.id)
    )


@dataclass(frozen=True, slots=True)
class _Note:
    """What an incident's insight says, and about whom."""

    key: str
    title: str
    body: str
    level: IncidentSeverity
    agent_id: uuid.UUID | None
    run_id: uuid.UUID | None


def _publish_insight(session: Session, serde: Serde, record: RunCompleted, note: _Note, tz: ZoneInfo) -> Insight:
    day = local_day(record.completed_at, tz)
    row = upsert_insight(
        session,
        org_id=record.org_id,
        dedupe_key=note.key,
        area=BUDGET_AREA,
        title=note.title,
        body=note.body,
        kind=InsightKind.INSIGHT,
        severity=InsightSeverity.CRITICAL if note.level is IncidentSeverity.HARD else InsightSeverity.WARNING,
        insight_date=day,
        run_id=note.run_id,
    )
    insight = Insight(
        org_id=record.org_id,
        request_id=record.request_id,
        insight_id=row.id,
        insight_key=note.key,
        insight_date=day,
        kind=InsightKind.INSIGHT,
        area=BUDGET_AREA,
        title=note.title,
        body=note.body,
        status=InsightStatus.NEW,
        agent_id=note.agent_id,
        run_id=record.run_id,
        conversation_id=record.conversation_id,
    )
    enqueue_record(session, Topics.INSIGHTS, insight, serde=serde)
    return insight
