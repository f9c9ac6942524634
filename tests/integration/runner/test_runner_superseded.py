"""A recovery attempt withdraws what its lost parent left unfinished (services/runner/superseded.py):
without it a runner killed after proposing a write left two approval cards for one request
(approving both sent twice), its queued messages stayed pending forever and its follow-ups were
scheduled again by the attempt. What the parent did, and what an owner approved, stays."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.mcp.tools import CrmTools
from services.runner.superseded import RATIONALE, WITHDRAWN
from switchboard.contracts import Insight, Serde, Topics
from switchboard.db.insights import upsert_insight
from switchboard.db.models import AgentDecision, AiAgentRun, Message, OutboxEvent, ScheduledFollowup
from switchboard.db.models.autonomy import WorkspaceInsight
from switchboard.db.session import create_async_engine, create_async_sessionmaker, tenant_transaction
from switchboard.run_tokens import RunTokenSettings, verify_run_token
from switchboard.tool_catalog import CONVERSATION_HISTORY
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_request, run_token
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.integration


def _parent_with_leftovers(rh: RunnerHarness, agent: Agent, run_id: uuid.UUID, status: str) -> dict[str, uuid.UUID]:
    """A parent run row in ``status`` with a proposal (and its Home item), an executed action, a
    scheduled follow-up and a queued message — what a run leaves after write-tool calls — and a
    follow-up and a message an owner's approval made meanwhile."""
    ids = {
        name: uuid.uuid4()
        for name in ("proposed", "executed", "followup", "message", "approved_followup", "approved_message")
    }
    now = datetime.now(UTC)
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.add(
            AiAgentRun(
                id=run_id,
                org_id=agent.org_id,
                agent_id=agent.agent_id,
                agent_version_id=agent.version_id,
                conversation_id=agent.conversation_id,
                status=status,
                **({"completed_at": now, "final_text": "Pronto!"} if status == "completed" else {}),
            )
        )
        session.flush()
        for key, decision_status in (("proposed", "proposed"), ("executed", "executed")):
            session.add(
                AgentDecision(
                    id=ids[key],
                    org_id=agent.org_id,
                    run_id=run_id,
                    agent_id=agent.agent_id,
                    area="crm",
                    action_type="crm_send_whatsapp_message",
                    proposed_action={"tool_name": "crm_send_whatsapp_message"},
                    autonomy_tier="propose" if key == "proposed" else "auto",
                    status=decision_status,
                    **({"executed_at": now} if key == "executed" else {}),
                )
            )
        session.flush()
        upsert_insight(
            session,
            org_id=agent.org_id,
            dedupe_key=f"decision:{ids['proposed']}",
            area="crm",
            title="Send a message?",
            run_id=run_id,
            agent_decision_id=ids["proposed"],
        )
        for key, approved in (("followup", False), ("approved_followup", True)):
            session.add(
                ScheduledFollowup(
                    id=ids[key],
                    org_id=agent.org_id,
                    conversation_id=agent.conversation_id,
                    contact_id=agent.contact_id,
                    agent_id=agent.agent_id,
                    created_by_run_id=run_id,
                    due_at=now + timedelta(hours=1),
                    reason="check back",
                    approved=approved,
                )
            )
        for key, body, attributes in (
            ("message", "Seu pedido saiu.", {"intent": "crm_send_whatsapp_message"}),
            ("approved_message", "Cupom de 10% enviado.", {"intent": "crm_send_whatsapp_message", "approved": True}),
        ):
            session.add(
                Message(
                    id=ids[key],
                    org_id=agent.org_id,
                    conversation_id=agent.conversation_id,
                    channel_session_id=agent.channel_session_id,
                    direction="outbound",
                    sender="agent",
                    dedupe_key=f"agent-tool:{run_id}:{key}",
                    body=body,
                    delivery_status="pending",
                    run_id=run_id,
                    attributes=attributes,
                )
            )
    return ids


def _state(rh: RunnerHarness, agent: Agent, ids: dict[str, uuid.UUID]) -> dict[str, tuple[object, ...]]:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        proposed = session.get(AgentDecision, ids["proposed"])
        executed = session.get(AgentDecision, ids["executed"])
        item = session.scalar(select(WorkspaceInsight).where(WorkspaceInsight.agent_decision_id == ids["proposed"]))
        assert proposed and executed and item
        state: dict[str, tuple[object, ...]] = {
            "proposed": (proposed.status, proposed.rationale),
            "executed": (executed.status,),
            "home": (item.status,),
        }
        for key in ("followup", "approved_followup"):
            followup = session.get(ScheduledFollowup, ids[key])
            assert followup is not None
            state[key] = (followup.status, followup.error)
        for key in ("message", "approved_message"):
            message = session.get(Message, ids[key])
            assert message is not None
            state[key] = (message.delivery_status, message.delivery_error)
        return state


def _insight_records(rh: RunnerHarness) -> list[Insight]:
    serde = Serde.from_settings(rh.kafka)
    with Session(rh.db) as session:
        payloads = session.scalars(select(OutboxEvent.payload).where(OutboxEvent.topic == Topics.INSIGHTS.name)).all()
    return [serde.decode(Topics.INSIGHTS, bytes(p)) for p in payloads]


async def test_a_recovery_attempt_withdraws_what_its_lost_parent_left_undone(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    inbound(rh.db, agent, "Oi, bom dia")  # earlier: the history starts with the customer
    message = inbound(rh.db, agent, "Meu pedido saiu?")
    parent = run_request(agent, [message])
    ids = _parent_with_leftovers(rh, agent, parent.run_id, "running")  # its runner was killed
    rh.fake.script([Reply(text="Saiu sim!")])

    retry = run_request(agent, [message], attempt=2, parent_run_id=parent.run_id)
    row = await rh.run(retry)

    assert row.status == "completed"
    assert _state(rh, agent, ids) == {
        "proposed": ("rejected", RATIONALE),
        "executed": ("executed",),  # done is done
        "home": ("dismissed",),
        "followup": ("cancelled", WITHDRAWN),
        "message": ("failed", WITHDRAWN),
        # An owner approved these after the parent was lost: the approval's delivery sends them.
        "approved_followup": ("scheduled", None),
        "approved_message": ("pending", None),
    }
    [call] = rh.fake.received
    prompt = json.dumps(call.body, ensure_ascii=False)
    assert "Meu pedido saiu?" in prompt
    assert "Seu pedido saiu." not in prompt, "a withdrawn message is not in the attempt's history: never said"
    assert "Cupom de 10% enviado." in prompt
    assert "latest 2 earlier message(s)" in prompt and "Older messages are not shown" not in prompt
    # Nor in what the history tool shows any later run.
    claims = verify_run_token(RunTokenSettings().secret(), run_token(agent, {CONVERSATION_HISTORY}))
    engine = create_async_engine(rh.db.url.render_as_string(hide_password=False), pool_size=1)
    try:
        history = await CrmTools(sessions=create_async_sessionmaker(engine)).conversation_history(
            claims, limit=20, before=None
        )
    finally:
        await engine.dispose()
    assert [m["text"] for m in history["messages"]] == ["Oi, bom dia", "Meu pedido saiu?", "Cupom de 10% enviado."]
    dismissed = [r for r in _insight_records(rh) if r.insight_key == f"decision:{ids['proposed']}"]
    assert [r.status.value for r in dismissed] == ["dismissed"], "the brief drops the card"


async def test_a_proposal_the_owner_is_deciding_is_left_to_them(rh: RunnerHarness) -> None:
    """The claim skips a decision row an approval holds (SKIP LOCKED): it neither waits on the
    approval's transaction nor overrides it."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    message = inbound(rh.db, agent, "Meu pedido saiu?")
    parent = run_request(agent, [message])
    ids = _parent_with_leftovers(rh, agent, parent.run_id, "running")
    rh.fake.script([Reply(text="Saiu sim!")])
    with Session(rh.db) as deciding, tenant_transaction(deciding, agent.org_id):
        deciding.execute(
            select(AgentDecision.id).where(AgentDecision.id == ids["proposed"]).with_for_update()
        ).one()  # the owner's approval holds the row
        row = await rh.run(run_request(agent, [message], attempt=2, parent_run_id=parent.run_id))
        assert row.status == "completed"
    assert _state(rh, agent, ids)["proposed"] == ("proposed", None)


async def test_a_parent_that_completed_keeps_everything(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    message = inbound(rh.db, agent, "Meu pedido saiu?")
    parent = run_request(agent, [message])
    ids = _parent_with_leftovers(rh, agent, parent.run_id, "completed")  # its run_completed was late
    rh.fake.script([Reply(text="Saiu sim!")])

    await rh.run(run_request(agent, [message], attempt=2, parent_run_id=parent.run_id))

    assert _state(rh, agent, ids) == {
        "proposed": ("proposed", None),
        "executed": ("executed",),
        "home": ("new",),
        "followup": ("scheduled", None),
        "message": ("pending", None),
        "approved_followup": ("scheduled", None),
        "approved_message": ("pending", None),
    }
