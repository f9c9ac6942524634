"""Erasing a contact (services/api/contacts/erasure.py): the customer's name, number, messages,
memory, traces, proposals and Home items about them leave every table — proven by scanning
every row of the org, in every table, for a canary planted in each place — while the counts
billing needs stay, another customer of the org keeps everything, and the same number writing
again is a stranger."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from switchboard.db.enums import Role
from switchboard.db.models import (
    AgentDecision,
    AiAgentRun,
    ChannelSession,
    Contact,
    Conversation,
    ConversationGoal,
    ConversationStateNote,
    ConversationSummary,
    MemoryFact,
    Message,
    ScheduledFollowup,
    WorkspaceDailyBrief,
    WorkspaceInsight,
    WorkspaceTodo,
)
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.brief import BriefFact
from switchboard.db.models.notifications import OrgNotification, RunDelivery
from switchboard.db.models.runs import DispatchDecision
from tests.integration.db.factories import create_agent_version
from tests.support.agents import tenant_session
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

Db = Callable[[uuid.UUID], Session]


class Customer:
    """One customer with something of theirs in every place personal data lands; ``canary`` is in each."""

    def __init__(self, org: OrgHandle, name: str) -> None:
        self.canary = f"{name}-{uuid.uuid4().hex[:10]}"
        c = self.canary
        phone = f"55119{uuid.uuid4().int % 10**8:08d}"
        with tenant_session(org) as s:
            channel = ChannelSession(org_id=org.org_id, external_session=f"s-{uuid.uuid4().hex[:10]}", label="Main")
            s.add(channel)
            s.flush()
            contact = Contact(
                org_id=org.org_id,
                external_id=f"{phone}@c.us",
                display_name=c,
                phone_number=f"+{phone}",
                email=f"{c}@example.com",
                attributes={"notify_name": c},
            )
            s.add(contact)
            s.flush()
            conversation = Conversation(
                org_id=org.org_id,
                channel_session_id=channel.id,
                contact_id=contact.id,
                chat_id=contact.external_id,
                summary=f"talked about {c}",
            )
            s.add(conversation)
            version = create_agent_version(s, org.org_id)
            s.flush()
            inbound = Message(
                org_id=org.org_id,
                conversation_id=conversation.id,
                channel_session_id=channel.id,
                direction="inbound",
                sender="contact",
                external_id=f"false_{phone}@c.us_{uuid.uuid4().hex[:8]}",
                body=f"Oi, sou {c}",
                attributes={"notifyName": c},
            )
            run = AiAgentRun(
                org_id=org.org_id,
                agent_id=version.agent_id,
                agent_version_id=version.id,
                conversation_id=conversation.id,
                contact_id=contact.id,
                channel_session_id=channel.id,
                status="completed",
                final_text=f"Olá {c}!",
                summary=f"answered {c}",
                tool_calls=[{"kind": "tool", "args": {"query": c}, "result": c}],
                prompt={"messages": [{"role": "user", "content": c}]},
                would_send_to={"chat_id": contact.external_id},
                actions_proposed=[{"summary": f"send {c} the catalog"}],
                tokens_in=100,
                tokens_out=20,
                cost_micros=4_200,
            )
            s.add_all([inbound, run])
            s.flush()
            outbound = Message(
                org_id=org.org_id,
                conversation_id=conversation.id,
                channel_session_id=channel.id,
                direction="outbound",
                sender="agent",
                dedupe_key=f"reply:{run.id}",
                body=f"Olá {c}!",
                run_id=run.id,
            )
            s.add(outbound)
            s.flush()
            decision = AgentDecision(
                org_id=org.org_id,
                run_id=run.id,
                area="crm",
                action_type="crm_send_whatsapp_message",
                proposed_action={"arguments": {"text": f"catalog for {c}"}},
                autonomy_tier="propose",
                rationale=f"{c} asked",
            )
            s.add(decision)
            s.flush()
            run_text, conversation_text = str(run.id), str(conversation.id)
            s.add_all(
                [
                    RunDelivery(
                        org_id=org.org_id,
                        run_id=run.id,
                        message_id=outbound.id,
                        kind="reply",
                        channel="waha",
                        status="sent",
                        external_id=f"true_{phone}@c.us_X",
                    ),
                    WorkspaceInsight(
                        org_id=org.org_id,
                        dedupe_key=f"action:{decision.id}",
                        area="crm",
                        title=f"Send {c} the catalog",
                        body=c,
                        run_id=run.id,
                        agent_decision_id=decision.id,
                    ),
                    BriefFact(  # the insight record as the brief keeps it: keyed by its insight key only
                        org_id=org.org_id,
                        kind="insight",
                        fact_key=f"action:{decision.id}",
                        day=date(2026, 12, 3),
                        occurred_at=datetime.now(UTC),
                        payload={"insight_key": f"action:{decision.id}", "title": f"Send {c}", "body": c},
                    ),
                    OrgNotification(  # a morning push that carried the digest
                        org_id=org.org_id,
                        dedupe_key=f"home_digest:{uuid.uuid4()}",
                        event_type="home.digest",
                        event_id=uuid.uuid4(),
                        payload={"date": "2026-12-03", "summary": "1 item", "digest": {"todo": []}},
                    ),
                    WorkspaceTodo(
                        org_id=org.org_id, text=f"Call {c}", source="slash_command", conversation_id=conversation.id
                    ),
                    ScheduledFollowup(
                        org_id=org.org_id,
                        conversation_id=conversation.id,
                        contact_id=contact.id,
                        due_at=datetime.now(UTC) + timedelta(days=1),
                        reason=f"call {c} back",
                        context={"note": c},
                    ),
                    DispatchDecision(
                        org_id=org.org_id,
                        dispatch_event_id=uuid.uuid4(),
                        outcome="no_match",
                        conversation_id=conversation.id,
                        details={"text": c},
                    ),
                    OrgNotification(
                        org_id=org.org_id,
                        dedupe_key=f"handoff:{run.id}",
                        event_type="conversation.handoff",
                        event_id=uuid.uuid4(),
                        payload={"conversation_id": conversation_text, "reason": c},
                    ),
                    BriefFact(
                        org_id=org.org_id,
                        kind="run",
                        fact_key=run_text,
                        day=date(2026, 12, 3),
                        occurred_at=datetime.now(UTC),
                        payload={
                            "run_id": run_text,
                            "cost_micros": 4_200,
                            "proposed": [{"summary": c, "action_type": "crm_send_whatsapp_message"}],
                        },
                    ),
                    ConversationSummary(
                        org_id=org.org_id,
                        conversation_id=conversation.id,
                        summary=c,
                        through_occurred_at=datetime.now(UTC),
                        through_message_id=inbound.id,
                        messages_covered=2,
                        provider="demo",
                        model="demo",
                    ),
                    MemoryFact(
                        org_id=org.org_id, scope="contact", contact_id=contact.id, fact=c, fact_key=c, source="api"
                    ),
                    ConversationStateNote(org_id=org.org_id, conversation_id=conversation.id, note=c),
                    ConversationGoal(
                        org_id=org.org_id,
                        conversation_id=conversation.id,
                        agent_id=version.agent_id,
                        version_id=version.id,
                        kind="goal",
                        goal=f"sell {c} a sofa",
                        budget_micros=1,
                        segment_budget_micros=1,
                        started_by_run_id=run.id,
                    ),
                ]
            )
            group_id = f"1203{uuid.uuid4().int % 10**14:014d}@g.us"  # a group's id is not a member's number
            group = Conversation(org_id=org.org_id, channel_session_id=channel.id, chat_id=group_id, is_group=True)
            s.add(group)
            s.flush()
            s.add(  # what they wrote in a group chat: the group's conversation, they are its participant
                Message(
                    org_id=org.org_id,
                    conversation_id=group.id,
                    channel_session_id=channel.id,
                    direction="inbound",
                    sender="contact",
                    external_id=f"false_{group_id}_{uuid.uuid4().hex[:8]}_{phone}@c.us",
                    body=f"{c} no grupo",
                    attributes={"participant": contact.external_id},
                )
            )
        self.contact_id, self.conversation_id, self.run_id = contact.id, conversation.id, run.id
        self.phone, self.decision_id = phone, decision.id

    def todo_item(self) -> dict[str, object]:
        """The digest's card of the proposal: it names the action and insight, not the run."""
        return {
            "kind": "proposed_action",
            "title": f"Send {self.canary}",
            "action_id": str(self.decision_id),
            "insight_key": f"action:{self.decision_id}",
        }


def _rows_holding(org: OrgHandle, needle: str) -> dict[str, int]:
    """Every table of the org (row-level security scopes the scan), rows whose text holds ``needle``."""
    with tenant_session(org) as s:
        tables = s.scalars(
            text(
                "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'alembic_version'"
                # What the application can read at all (a few internal tables hold counters only).
                " AND has_table_privilege(c.oid, 'SELECT')"
            )
        ).all()
        found: dict[str, int] = {}
        for table in tables:
            count = s.scalar(
                text(f'SELECT count(*) FROM "{table}" AS t WHERE t::text LIKE :needle'), {"needle": f"%{needle}%"}
            )
            if count:
                found[table] = int(count)
        return found


async def test_erasing_a_contact_leaves_no_trace_of_them_and_keeps_the_books(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    erased, kept = Customer(org, "ana"), Customer(org, "bia")
    with tenant_session(org) as s:
        todo = [erased.todo_item(), kept.todo_item()]
        s.add(
            WorkspaceDailyBrief(org_id=org.org_id, day=date(2026, 12, 3), digest={"pulse": {"runs": 2}, "todo": todo})
        )
        for push in s.scalars(select(OrgNotification).where(OrgNotification.event_type == "home.digest")):
            push.payload = {**push.payload, "digest": {"todo": todo}}
    planted, kept_before = _rows_holding(org, erased.canary), _rows_holding(org, kept.canary)
    assert len(planted) >= 15, f"the canary is everywhere before: {planted}"

    path = f"/api/v1/contacts/{erased.contact_id}:erase"
    assert (await client.post(path, headers=org.headers(Role.MANAGER))).status_code == 403
    assert (await client.post(path, headers=org.headers(mfa=False))).status_code == 403
    answered = await client.post(path, headers=org.headers())
    assert answered.status_code == 200, answered.text
    view = answered.json()["data"]
    assert view["erased_at"] is not None and view["display_name"] is None and view["phone_number"] is None

    assert _rows_holding(org, erased.canary) == {}, "nothing of the erased customer is left anywhere"
    assert _rows_holding(org, erased.phone) == {}, "nor their number (chat ids, message ids)"
    assert _rows_holding(org, kept.canary) == kept_before, "the org's other customer keeps everything"

    with tenant_session(org) as s:
        run = s.get_one(AiAgentRun, erased.run_id)
        assert (run.status, run.tokens_in, run.tokens_out, run.cost_micros) == ("completed", 100, 20, 4_200)
        decision = s.get_one(AgentDecision, erased.decision_id)
        assert decision.action_type == "crm_send_whatsapp_message"
        assert decision.status == "rejected", "a proposal still waiting can no longer be approved"
        [followup] = s.scalars(select(ScheduledFollowup).where(ScheduledFollowup.contact_id == erased.contact_id))
        assert followup.status == "cancelled"
        assert s.get_one(Conversation, erased.conversation_id).status == "closed"
        [fact] = s.scalars(select(BriefFact).where(BriefFact.fact_key == str(erased.run_id)))
        assert fact.payload["cost_micros"] == 4_200 and fact.payload["proposed"][0]["action_type"]
        digest = s.get_one(WorkspaceDailyBrief, (org.org_id, date(2026, 12, 3))).digest
        assert [item["title"] for item in digest["todo"]] == ["[erased]", kept.todo_item()["title"]]
        [audit] = s.scalars(
            select(AuditLogEntry).where(
                AuditLogEntry.action == "contact.erased", AuditLogEntry.target_id == str(erased.contact_id)
            )
        )
        # Their two messages and the one they wrote in a group.
        assert audit.details["rows"]["messages"] == 3 and erased.canary not in json.dumps(audit.details)

    # A writer already under way puts something back (a late reply): erasing again removes it.
    with tenant_session(org) as s:
        late = s.scalars(select(Message).where(Message.conversation_id == erased.conversation_id)).first()
        assert late is not None
        late.body = f"late reply to {erased.canary}"
    again = await client.post(path, headers=org.headers())
    assert again.status_code == 200 and again.json()["data"]["erased_at"] == view["erased_at"]
    assert _rows_holding(org, erased.canary) == {}
    written_back = await client.patch(
        f"/api/v1/contacts/{erased.contact_id}", json={"display_name": "Ana"}, headers=org.headers(Role.MANAGER)
    )
    assert written_back.status_code == 409 and written_back.json()["error"]["code"] == "contact_erased"
    taught = await client.post(
        "/api/v1/memory/facts",
        json={"fact": "Ana likes blue", "contact_id": str(erased.contact_id)},
        headers=org.headers(Role.MANAGER),
    )
    assert taught.status_code == 409 and taught.json()["error"]["code"] == "contact_erased"


async def test_a_contact_with_an_active_run_is_not_erased(client: httpx.AsyncClient, org: OrgHandle) -> None:
    customer = Customer(org, "caio")
    with tenant_session(org) as s:
        s.get_one(AiAgentRun, customer.run_id).status = "running"
    refused = await client.post(f"/api/v1/contacts/{customer.contact_id}:erase", headers=org.headers())
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "contact_has_active_run"
    assert refused.json()["error"]["details"]["run_ids"] == [str(customer.run_id)]
    assert _rows_holding(org, customer.canary), "nothing was erased"
