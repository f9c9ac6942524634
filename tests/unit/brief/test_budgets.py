"""The effective cap of an agent and the severity its month-to-date spend reached [002]."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from services.brief.budgets import Cap, Spend, effective_cap, insight_key, severity
from switchboard.db.enums import BudgetAction, IncidentSeverity
from switchboard.db.models.agents import AiAgent
from switchboard.db.models.budgets import BudgetPolicy


def _agent(monthly: int | None) -> AiAgent:
    return AiAgent(id=uuid.uuid4(), name="A", monthly_budget_micros=monthly)


def _policy(**fields: object) -> BudgetPolicy:
    values: dict[str, object] = {"id": uuid.uuid4(), "enabled": True, "soft_threshold_pct": 50}
    values.update(fields)
    return BudgetPolicy(scope="agent", **values)


def test_an_enabled_policy_wins_over_the_agents_own_figure() -> None:
    policy = _policy(cost_limit_micros=2_000_000, token_limit=10_000, hard_action="pause_agent")
    assert effective_cap(policy, _agent(1_000_000)) == Cap(2_000_000, 10_000, 50, policy.id)


def test_a_policy_says_what_exhausting_it_does_and_the_agents_own_figure_pauses() -> None:
    notify = _policy(cost_limit_micros=5, hard_action="notify")
    assert effective_cap(notify, _agent(None)) == Cap(5, None, 50, notify.id, BudgetAction.NOTIFY)
    assert effective_cap(None, _agent(1_000_000)) == Cap(1_000_000, None, 80, None, BudgetAction.PAUSE_AGENT)


def test_a_disabled_policy_falls_back_to_the_agents_figure_with_the_default_threshold() -> None:
    assert effective_cap(_policy(enabled=False, cost_limit_micros=5), _agent(1_000_000)) == Cap(
        1_000_000, None, 80, None
    )


@pytest.mark.parametrize("monthly", [None, 0])
def test_no_figure_means_unlimited(monthly: int | None) -> None:
    assert effective_cap(None, _agent(monthly)) is None
    assert effective_cap(_policy(cost_limit_micros=None, token_limit=None), _agent(monthly)) is None


@pytest.mark.parametrize(
    ("spend", "expected"),
    [
        (Spend(790_000, 0), None),
        (Spend(800_000, 0), IncidentSeverity.WARNING),
        (Spend(999_999, 0), IncidentSeverity.WARNING),
        (Spend(1_000_000, 0), IncidentSeverity.HARD),
        (Spend(0, 10_000), IncidentSeverity.HARD),  # tokens alone exhaust it
        (Spend(0, 8_500), IncidentSeverity.WARNING),
    ],
)
def test_the_highest_severity_reached_on_any_dimension(spend: Spend, expected: IncidentSeverity | None) -> None:
    assert severity(spend, Cap(1_000_000, 10_000, 80, None)) is expected


def test_insight_key_names_agent_month_and_severity() -> None:
    agent_id = uuid.UUID(int=7)
    assert insight_key(agent_id, date(2026, 3, 1), IncidentSeverity.HARD) == f"budget_incident:{agent_id}:2026-03:hard"
    assert insight_key(None, date(2026, 3, 1), IncidentSeverity.WARNING) == "budget_incident:org:2026-03:warning"
