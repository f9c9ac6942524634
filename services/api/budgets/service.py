"""Set, list and remove monthly budget policies (docs/api.md "Budgets"). Sync functions over the
request's org-scoped session; they never commit.

The org's cap is enforced by the dispatcher before dispatch (its hard action is always
``block_dispatch``); an agent's by the brief after each run (``pause_agent`` or ``notify``).
Both read these rows, so a change applies from the next dispatch or run.
"""

from __future__ import annotations

import uuid

from sqlalchemy import Select, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.api.budgets.schemas import AgentBudgetWrite, BudgetPolicyView, OrgBudgetWrite
from services.api.core.errors import NotFound, ValidationFailed
from switchboard.db.audit import record_audit
from switchboard.db.enums import BudgetAction, BudgetScope
from switchboard.db.models.agents import AiAgent
from switchboard.db.models.budgets import NO_AGENT_SQL, BudgetPolicy


class BudgetLimitRequired(ValidationFailed):
    code = "budget_limit_required"
    default_message = "Give cost_limit_micros, token_limit or both: a policy without a limit caps nothing"


def list_policies(session: Session, org_id: uuid.UUID) -> list[BudgetPolicyView]:
    """The org's policy first, then the agents' (oldest first)."""
    rows = session.scalars(
        select(BudgetPolicy)
        .where(BudgetPolicy.org_id == org_id)
        .order_by(BudgetPolicy.agent_id.is_not(None), BudgetPolicy.created_at, BudgetPolicy.id)
    ).all()
    return [BudgetPolicyView.model_validate(r) for r in rows]


def set_org_policy(
    session: Session, org_id: uuid.UUID, body: OrgBudgetWrite, user_id: uuid.UUID | None, request_id: str
) -> BudgetPolicyView:
    return _upsert(session, org_id, None, body, BudgetAction.BLOCK_DISPATCH, user_id, request_id)


def set_agent_policy(
    session: Session,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    body: AgentBudgetWrite,
    user_id: uuid.UUID | None,
    request_id: str,
) -> BudgetPolicyView:
    if session.scalar(select(AiAgent.id).where(AiAgent.org_id == org_id, AiAgent.id == agent_id)) is None:
        raise NotFound("No such agent")
    return _upsert(session, org_id, agent_id, body, BudgetAction(body.hard_action), user_id, request_id)


def delete_policy(
    session: Session, org_id: uuid.UUID, agent_id: uuid.UUID | None, user_id: uuid.UUID | None, request_id: str
) -> None:
    """Remove the org's (``agent_id`` None) or an agent's policy; 404 when there is none.

    An agent without a policy falls back to its own ``monthly_budget_micros`` (docs/brief.md)."""
    row = session.scalars(_subject(org_id, agent_id).with_for_update()).one_or_none()
    if row is None:
        raise NotFound("No budget policy for this subject")
    session.delete(row)
    _audit(session, org_id, "budget_policy.deleted", row, user_id, request_id)
    session.flush()


def _subject(org_id: uuid.UUID, agent_id: uuid.UUID | None) -> Select[BudgetPolicy]:
    subject = BudgetPolicy.agent_id.is_(None) if agent_id is None else BudgetPolicy.agent_id == agent_id
    return select(BudgetPolicy).where(BudgetPolicy.org_id == org_id, subject)


def _upsert(
    session: Session,
    org_id: uuid.UUID,
    agent_id: uuid.UUID | None,
    body: OrgBudgetWrite | AgentBudgetWrite,
    hard_action: BudgetAction,
    user_id: uuid.UUID | None,
    request_id: str,
) -> BudgetPolicyView:
    if body.cost_limit_micros is None and body.token_limit is None:
        raise BudgetLimitRequired()
    values = {
        "cost_limit_micros": body.cost_limit_micros,
        "token_limit": body.token_limit,
        "soft_threshold_pct": body.soft_threshold_pct,
        "enabled": body.enabled,
        "hard_action": hard_action.value,
    }
    stmt = insert(BudgetPolicy).values(
        org_id=org_id,
        scope=(BudgetScope.ORGANIZATION if agent_id is None else BudgetScope.AGENT).value,
        agent_id=agent_id,
        created_by=user_id,
        **values,
    )
    # One policy per subject (the unique index on org and coalesce(agent_id, NO_AGENT)).
    policy_id = session.scalar(
        stmt.on_conflict_do_update(
            index_elements=[BudgetPolicy.org_id, func.coalesce(BudgetPolicy.agent_id, NO_AGENT_SQL)],
            set_={**values, "updated_at": func.now()},
        ).returning(BudgetPolicy.id)
    )
    row = session.get_one(BudgetPolicy, policy_id, populate_existing=True)
    _audit(session, org_id, "budget_policy.set", row, user_id, request_id)
    session.flush()
    return BudgetPolicyView.model_validate(row)


def _audit(
    session: Session, org_id: uuid.UUID, action: str, row: BudgetPolicy, user_id: uuid.UUID | None, request_id: str
) -> None:
    record_audit(
        session,
        org_id=org_id,
        action=action,
        actor_user_id=user_id,
        target_type="budget_policy",
        target_id=row.id,
        details={
            "scope": row.scope,
            "agent_id": None if row.agent_id is None else str(row.agent_id),
            "cost_limit_micros": row.cost_limit_micros,
            "token_limit": row.token_limit,
            "soft_threshold_pct": row.soft_threshold_pct,
            "hard_action": row.hard_action,
            "enabled": row.enabled,
        },
        request_id=request_id,
    )
