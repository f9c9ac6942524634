"""``/api/v1/budget-policies``: the monthly caps of the org and of each agent [SPEC §9].

Reads need ``manager``; setting or removing a cap is an admin write (MFA), audited.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, status

from services.api.budgets import service
from services.api.budgets.schemas import AgentBudgetWrite, BudgetPolicyView, OrgBudgetWrite
from services.api.core.auth import AdminWrite, Manager
from services.api.core.errors import Forbidden, MfaRequired, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.responses import Envelope

router = APIRouter(prefix="/api/v1", tags=["budgets"])

_READ_ERRORS = error_responses(Unauthorized, Forbidden)
_WRITE_ERRORS = error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, ValidationFailed)


@router.get("/budget-policies", response_model=Envelope[list[BudgetPolicyView]], responses=_READ_ERRORS)
async def list_budget_policies(ctx: Manager) -> Envelope[list[BudgetPolicyView]]:
    """The org's cap first, then the agents' caps."""
    return Envelope(data=await ctx.session.run_sync(lambda s: service.list_policies(s, ctx.org_id)))


@router.put("/budget-policies/organization", response_model=Envelope[BudgetPolicyView], responses=_WRITE_ERRORS)
async def set_org_budget(body: OrgBudgetWrite, ctx: AdminWrite) -> Envelope[BudgetPolicyView]:
    """Create or replace the org's monthly cap. Reaching it stops new runs (``budget_exceeded``) and
    tells the owner once (a budget incident); passing ``soft_threshold_pct`` warns once."""
    view = await ctx.session.run_sync(
        lambda s: service.set_org_policy(s, ctx.org_id, body, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)


@router.put("/budget-policies/agents/{agent_id}", response_model=Envelope[BudgetPolicyView], responses=_WRITE_ERRORS)
async def set_agent_budget(agent_id: uuid.UUID, body: AgentBudgetWrite, ctx: AdminWrite) -> Envelope[BudgetPolicyView]:
    """Create or replace one agent's monthly cap (it wins over the agent's own monthly figure)."""
    view = await ctx.session.run_sync(
        lambda s: service.set_agent_policy(s, ctx.org_id, agent_id, body, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)


@router.delete("/budget-policies/organization", status_code=status.HTTP_204_NO_CONTENT, responses=_WRITE_ERRORS)
async def delete_org_budget(ctx: AdminWrite) -> None:
    await ctx.session.run_sync(
        lambda s: service.delete_policy(s, ctx.org_id, None, ctx.principal.user_id, ctx.request_id)
    )


@router.delete("/budget-policies/agents/{agent_id}", status_code=status.HTTP_204_NO_CONTENT, responses=_WRITE_ERRORS)
async def delete_agent_budget(agent_id: uuid.UUID, ctx: AdminWrite) -> None:
    await ctx.session.run_sync(
        lambda s: service.delete_policy(s, ctx.org_id, agent_id, ctx.principal.user_id, ctx.request_id)
    )
