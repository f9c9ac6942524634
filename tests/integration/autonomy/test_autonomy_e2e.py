"""Autonomy end to end (issue 6 items 6-7): off / propose / auto through real runs (real broker,
database and MCP server, fake provider), approvals through the API (exactly once, promotion
suggestion), and pause-for-approval / resume."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from switchboard.contracts import (
    DispatchRequested,
    Insight,
    Record,
    RunCompleted,
    RunRequested,
    Serde,
    Topics,
    WakeContext,
)
from switchboard.contracts.enums import InsightKind, Vitality, WakeReason
from switchboard.db.models import OutboxEvent
from switchboard.db.session import tenant_transaction
from switchboard.tool_catalog import SCHEDULE_FOLLOWUP, SEND_WHATSAPP_MESSAGE
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_request
from tests.support import agents
from tests.support.api import OrgHandle, create_org
from tests.support.fake_llm import Received, Reply, tool
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


@pytest.fixture
def org(stack: StackEndpoints) -> OrgHandle:
    return create_org(stack.database_url)


def _offered(received: Received) -> set[str]:
    return {t["name"] for t in received.body.get("tools", [])}


def _script(call: Reply, final: str = "Done.") -> Any:
    """The write call first, then a text answer that echoes the tool result it got."""
    state = {"n": 0}

    def script(received: Received) -> Reply:
        state["n"] += 1
        if state["n"] == 1 and call.calls[0].name in _offered(received):
            return call
        return Reply(text=final)

    return script


def _outbox(rh: RunnerHarness, key: uuid.UUID, topic: Any) -> list[Record]:
    serde = Serde.from_settings(rh.kafka)
    with Session(rh.db) as session:
        payloads = session.scalars(
            select(OutboxEvent.payload)
            .where(OutboxEvent.key == str(key).encode(), OutboxEvent.topic == topic.name)
            .order_by(OutboxEvent.id)
        ).all()
    return [serde.decode(topic, p) for p in payloads]


def _rows(rh: RunnerHarness, org_id: uuid.UUID, sql: str, **params: Any) -> list[Any]:
    with Session(rh.db) as session, tenant_transaction(session, org_id):
        return list(session.execute(text(sql), params).mappings().all())


async def _put(api: httpx.AsyncClient, org: OrgHandle, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await api.put(f"/api/v1/autonomy{path}", json=body, headers=org.headers())
    assert response.status_code == 200, response.text
    return dict(response.json()["data"])


def _agent(rh: RunnerHarness, org: OrgHandle, *tools: str, **kwargs: Any) -> Agent:
    return create_agent(rh.db, org_id=org.org_id, tool_ids=list(tools), **kwargs)


async def _propose(rh: RunnerHarness, agent: Agent, body: str) -> tuple[RunRequested, uuid.UUID]:
    rh.fake.script(_script(tool(SEND_WHATSAPP_MESSAGE, {"text": body})))
    request = run_request(agent, [inbound(rh.db, agent, "Can you confirm my booking?")])
    row = await rh.run(request)
    assert row.status == "completed", (row.error_code, row.summary)
    decisions = _rows(rh, agent.org_id, "SELECT id, status FROM agent_decisions WHERE run_id = :r", r=request.run_id)
    assert [d["status"] for d in decisions] == ["proposed"]
    return request, decisions[0]["id"]


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago"])  # UTC+14 and UTC-11
async def test_a_proposal_is_a_fact_of_the_orgs_own_day(rh: RunnerHarness, org: OrgHandle, zone: str) -> None:
    """Every Home fact is dated in the org's time zone: a UTC date put an evening proposal of a
    UTC-negative org on tomorrow's Home (and its approval left today's card in place)."""
    _rows_exec(rh, org.org_id, "UPDATE organizations SET time_zone = :z WHERE id = :o", z=zone, o=org.org_id)
    agent = _agent(rh, org, SEND_WHATSAPP_MESSAGE)
    _, decision_id = await _propose(rh, agent, "Your booking is confirmed.")
    card = _rows(
        rh, org.org_id, "SELECT insight_date FROM workspace_insights WHERE agent_decision_id = :d", d=decision_id
    )
    assert [c["insight_date"] for c in card] == [datetime.now(ZoneInfo(zone)).date()]


async def test_off_and_kill_switches_hide_write_tools(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle
) -> None:
    agent = _agent(rh, org, SEND_WHATSAPP_MESSAGE)
    await _put(api, org, "/areas/crm", {"mode": "off"})
    rh.fake.script(_script(tool(SEND_WHATSAPP_MESSAGE, {"text": "hi"}), final="No tools."))
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "hello")]))
    assert row.status == "completed" and row.final_text == "No tools."
    assert all(SEND_WHATSAPP_MESSAGE not in _offered(r) for r in rh.fake.received[before:])

    # auto, but the area's kill switch forces off; cleared, the org's kill switch does the same.
    await _put(api, org, "/areas/crm", {"mode": "auto"})
    view = await _put(api, org, "/kill-switch", {"engaged": True, "area": "crm"})
    assert next(a for a in view["areas"] if a["area"] == "crm")["effective_mode"] == "off"
    await _put(api, org, "/kill-switch", {"engaged": False, "area": "crm"})
    view = await _put(api, org, "/kill-switch", {"engaged": True})
    assert view["kill_switch"] is True
    crm = next(a for a in view["areas"] if a["area"] == "crm")
    assert (crm["mode"], crm["kill_switch"], crm["effective_mode"]) == ("auto", False, "off")
    before = len(rh.fake.received)
    await rh.run(run_request(agent, [inbound(rh.db, agent, "hello again")]))
    assert all(SEND_WHATSAPP_MESSAGE not in _offered(r) for r in rh.fake.received[before:])
    assert not _rows(rh, org.org_id, "SELECT 1 FROM messages WHERE direction = 'outbound'")
    audited = _rows(rh, org.org_id, "SELECT action FROM audit_log WHERE action LIKE 'autonomy.%' ORDER BY created_at")
    assert {r["action"] for r in audited} >= {"autonomy.mode_set", "autonomy.kill_switch_set"}
    # Changing settings needs admin + MFA.
    denied = await api.put("/api/v1/autonomy/areas/crm", json={"mode": "auto"}, headers=org.headers(mfa=False))
    assert denied.status_code == 403


async def test_a_kill_switch_engaged_during_a_run_refuses_its_next_write(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle
) -> None:
    """The owner pulls the kill switch while the agent is thinking (crm is ``auto``): the write
    the model then asks for is refused, nothing is sent, and the run says why in its trace."""
    agent = _agent(rh, org, SEND_WHATSAPP_MESSAGE)
    await _put(api, org, "/areas/crm", {"mode": "auto"})
    calls = {"n": 0}

    def script(received: Received) -> Reply:
        calls["n"] += 1
        if calls["n"] == 1:
            # The owner's switch, committed before the model's answer reaches the runner.
            _rows_exec(
                rh, org.org_id, "UPDATE organizations SET autonomy_kill_switch = true WHERE id = :o", o=org.org_id
            )
            return tool(SEND_WHATSAPP_MESSAGE, {"text": "Discount applied"})
        return Reply(text="I cannot send that now.")

    rh.fake.script(script)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Can I have a discount?")]))
    assert row.status == "completed"
    assert SEND_WHATSAPP_MESSAGE in _offered(rh.fake.received[-2]), "offered: the run began under auto"
    assert not _rows(rh, org.org_id, "SELECT 1 FROM messages WHERE run_id = :r AND direction = 'outbound'", r=row.id)
    assert not _rows(rh, org.org_id, "SELECT 1 FROM agent_decisions WHERE run_id = :r", r=row.id)
    assert "autonomy for its area is off" in json.dumps(rh.fake.received[-1].body)
    guards = _rows(rh, org.org_id, "SELECT tool_calls FROM ai_agent_runs WHERE id = :r", r=row.id)[0]["tool_calls"]
    assert "autonomy_off" in json.dumps(guards), "the trace says why the write was refused"


async def test_propose_records_without_executing_and_approval_executes_exactly_once(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle
) -> None:
    agent = _agent(rh, org, SEND_WHATSAPP_MESSAGE)
    before = len(rh.fake.received)
    request, decision_id = await _propose(rh, agent, "Your booking is confirmed.")

    # Not executed: no outbound message; the model was told it awaits approval.
    assert not _rows(rh, org.org_id, "SELECT 1 FROM messages WHERE run_id = :r", r=request.run_id)
    second = json.dumps(rh.fake.received[before + 1].body)
    assert "proposed for the owner" in second
    completed = next(r for r in _outbox(rh, agent.conversation_id, Topics.RUN_COMPLETED) if isinstance(r, RunCompleted))
    assert completed.actions_executed == ()
    assert [(a.action_id, a.tool_name, a.area) for a in completed.actions_proposed] == [
        (decision_id, SEND_WHATSAPP_MESSAGE, "crm")
    ]
    stored = _rows(rh, org.org_id, "SELECT actions_proposed FROM ai_agent_runs WHERE id = :r", r=request.run_id)
    assert [a["action_id"] for a in stored[0]["actions_proposed"]] == [str(decision_id)]
    insights = [r for r in _outbox(rh, org.org_id, Topics.INSIGHTS) if isinstance(r, Insight)]
    proposal = next(i for i in insights if i.proposed_action and i.proposed_action.action_id == decision_id)
    assert proposal.kind is InsightKind.PROPOSED_ACTION and proposal.area == "crm"
    listed = await api.get("/api/v1/decisions", params={"status": "proposed"}, headers=org.headers())
    assert [a["id"] for a in listed.json()["data"]] == [str(decision_id)]

    # Another org's action does not exist for it.
    url = f"/api/v1/decisions/{decision_id}:approve"
    stranger = create_org(org.database_url, name="Stranger")
    assert (await api.post(url, headers=stranger.headers())).status_code == 404
    # Two approvals at once: one executes, the other is told it was decided.
    first, again = await asyncio.gather(api.post(url, headers=org.headers()), api.post(url, headers=org.headers()))
    assert sorted([first.status_code, again.status_code]) == [200, 409], (first.text, again.text)
    sent = _rows(
        rh, org.org_id, "SELECT body FROM messages WHERE run_id = :r AND direction = 'outbound'", r=request.run_id
    )
    assert [m["body"] for m in sent] == ["Your booking is confirmed."]
    row = _rows(
        rh, org.org_id, "SELECT status, decided_by, executed_at FROM agent_decisions WHERE id = :d", d=decision_id
    )[0]
    assert row["status"] == "executed" and row["decided_by"] == org.admin_user_id and row["executed_at"] is not None


async def test_third_approval_of_a_type_suggests_auto_and_never_switches(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle
) -> None:
    agent = _agent(rh, org, SEND_WHATSAPP_MESSAGE, SCHEDULE_FOLLOWUP, followup={"callback_enabled": True})
    promote = "SELECT title FROM workspace_insights WHERE dedupe_key = 'promote:crm:crm_send_whatsapp_message'"
    for n in range(3):
        assert not _rows(rh, org.org_id, promote)
        _, decision_id = await _propose(rh, agent, f"Reminder number {n}")
        ok = await api.post(f"/api/v1/decisions/{decision_id}:approve", headers=org.headers())
        assert ok.status_code == 200, ok.text
    assert len(_rows(rh, org.org_id, promote)) == 1
    # Nothing switched by itself: the area still proposes until the owner accepts.
    view = (await api.get("/api/v1/autonomy", headers=org.headers())).json()["data"]
    assert next(a for a in view["areas"] if a["area"] == "crm")["mode"] == "propose"
    accept = f"/api/v1/autonomy/crm/promotions/{SEND_WHATSAPP_MESSAGE}:accept"
    assert (await api.post(accept, headers=org.headers(mfa=False))).status_code == 403
    accepted = await api.post(accept, headers=org.headers())
    assert accepted.status_code == 200, accepted.text
    status = "SELECT status FROM workspace_insights WHERE dedupe_key = 'promote:crm:crm_send_whatsapp_message'"
    assert _rows(rh, org.org_id, status)[0]["status"] == "actioned"

    # That action type became auto, not its area: scheduling a follow-up (same crm area) still asks.
    view = accepted.json()["data"]
    crm = next(a for a in view["areas"] if a["area"] == "crm")
    assert crm["mode"] == crm["effective_mode"] == "propose"
    actions = {a["action_type"]: (a["mode"], a["effective_mode"]) for a in view["actions"]}
    assert actions[SEND_WHATSAPP_MESSAGE] == ("auto", "auto")
    assert actions[SCHEDULE_FOLLOWUP] == (None, "propose")
    calls = iter(
        [
            tool(SEND_WHATSAPP_MESSAGE, {"text": "Sent on my own"}),
            tool(SCHEDULE_FOLLOWUP, {"reason": "check", "due_in_minutes": 60}),
        ]
    )
    rh.fake.script(lambda received: next(calls, Reply(text="Done.")))
    request = run_request(agent, [inbound(rh.db, agent, "Remind me tomorrow")])
    row = await rh.run(request)
    assert row.status == "completed", (row.error_code, row.summary)
    decided = _rows(
        rh,
        org.org_id,
        "SELECT action_type, status, autonomy_tier FROM agent_decisions WHERE run_id = :r",
        r=request.run_id,
    )
    assert sorted((d["action_type"], d["status"], d["autonomy_tier"]) for d in decided) == [
        (SCHEDULE_FOLLOWUP, "proposed", "propose"),
        (SEND_WHATSAPP_MESSAGE, "executed", "auto"),
    ]
    sent = _rows(
        rh, org.org_id, "SELECT body FROM messages WHERE run_id = :r AND direction = 'outbound'", r=request.run_id
    )
    assert [m["body"] for m in sent] == ["Sent on my own"]
    assert not _rows(rh, org.org_id, "SELECT 1 FROM scheduled_followups WHERE created_by_run_id = :r", r=request.run_id)

    # Off wins over an action type's own mode; DELETE makes it follow its area again (both audited).
    view = await _put(api, org, "/areas/crm", {"mode": "off"})
    assert {a["action_type"]: a["effective_mode"] for a in view["actions"]}[SEND_WHATSAPP_MESSAGE] == "off"
    await _put(api, org, "/areas/crm", {"mode": "propose"})
    cleared = await api.delete(f"/api/v1/autonomy/actions/{SEND_WHATSAPP_MESSAGE}", headers=org.headers())
    assert cleared.status_code == 200, cleared.text
    after = {a["action_type"]: (a["mode"], a["effective_mode"]) for a in cleared.json()["data"]["actions"]}
    assert after[SEND_WHATSAPP_MESSAGE] == (None, "propose")
    audited = _rows(
        rh,
        org.org_id,
        # Each in its own transaction: created_at (now()) orders them; a heap scan alone does not.
        "SELECT details FROM audit_log WHERE action = 'autonomy.action_mode_set' ORDER BY created_at",
    )
    assert [a["details"]["mode"] for a in audited] == ["auto", None]


async def test_an_action_types_own_mode_is_set_checked_and_needs_admin_mfa(
    api: httpx.AsyncClient, org: OrgHandle
) -> None:
    path = f"/api/v1/autonomy/actions/{SCHEDULE_FOLLOWUP}"
    assert (await api.put(path, json={"mode": "auto"}, headers=org.headers(mfa=False))).status_code == 403
    off = await api.put(path, json={"mode": "off"}, headers=org.headers())
    assert off.status_code == 422 and off.json()["error"]["code"] == "validation_error", off.text
    unknown = await api.put(
        "/api/v1/autonomy/actions/crm_search_contacts", json={"mode": "auto"}, headers=org.headers()
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found", unknown.text
    view = await _put(api, org, f"/actions/{SCHEDULE_FOLLOWUP}", {"mode": "auto"})
    assert {a["action_type"]: a["effective_mode"] for a in view["actions"]}[SCHEDULE_FOLLOWUP] == "auto"
    # A promote card names its area: accepting it for an action type of another area is refused.
    wrong = await api.post(f"/api/v1/autonomy/booking/promotions/{SEND_WHATSAPP_MESSAGE}:accept", headers=org.headers())
    assert wrong.status_code == 404, wrong.text


async def test_auto_executes_and_records_the_undo(rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle) -> None:
    agent = _agent(rh, org, SCHEDULE_FOLLOWUP, followup={"callback_enabled": True})
    await _put(api, org, "/areas/crm", {"mode": "auto"})
    rh.fake.script(_script(tool(SCHEDULE_FOLLOWUP, {"reason": "call back", "due_in_minutes": 60})))
    request = run_request(agent, [inbound(rh.db, agent, "Call me tomorrow")])
    row = await rh.run(request)
    assert row.status == "completed"
    followups = _rows(
        rh, org.org_id, "SELECT id FROM scheduled_followups WHERE created_by_run_id = :r", r=request.run_id
    )
    assert len(followups) == 1
    decision = _rows(
        rh,
        org.org_id,
        "SELECT id, status, autonomy_tier, execution_result FROM agent_decisions WHERE run_id = :r",
        r=request.run_id,
    )
    assert len(decision) == 1 and decision[0]["status"] == "executed" and decision[0]["autonomy_tier"] == "auto"
    undo = decision[0]["execution_result"]["undo"]
    assert undo == {"tool_name": "crm_cancel_followup", "arguments": {"followup_id": str(followups[0]["id"])}}
    completed = next(r for r in _outbox(rh, agent.conversation_id, Topics.RUN_COMPLETED) if isinstance(r, RunCompleted))
    assert [(a.action_id, a.area) for a in completed.actions_executed] == [(decision[0]["id"], "crm")]


async def _wait_status(rh: RunnerHarness, request: RunRequested, status: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        row = await asyncio.to_thread(rh.run_row, request)
        if row is not None and row.status == status:
            return
        assert time.monotonic() < deadline, f"run not {status}: {row and row.status}"
        await asyncio.sleep(0.1)


async def _parked(rh: RunnerHarness, org: OrgHandle) -> tuple[Agent, RunRequested]:
    """A run of an agent that pauses on its proposals, parked after proposing a WhatsApp send."""
    agent = _agent(rh, org, SEND_WHATSAPP_MESSAGE)
    _rows_exec(
        rh, org.org_id, "UPDATE ai_agent_versions SET pause_on_proposal = true WHERE id = :v", v=agent.version_id
    )
    rh.fake.script(_script(tool(SEND_WHATSAPP_MESSAGE, {"text": "Discount applied"}), final="Resumed."))
    request = run_request(agent, [inbound(rh.db, agent, "Can I have a discount?")])
    await rh.submit(request)
    await _wait_status(rh, request, "awaiting_approval")
    return agent, request


def _wakes(rh: RunnerHarness, agent: Agent) -> list[DispatchRequested]:
    records = _outbox(rh, agent.conversation_id, Topics.DISPATCH_REQUESTED)
    return [d for d in records if isinstance(d, DispatchRequested)]


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_pause_parks_the_run_and_the_decision_resumes_it(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle, decision: str
) -> None:
    before = len(rh.fake.received)
    agent, request = await _parked(rh, org)
    assert len(rh.fake.received) - before == 1  # parked right after the proposal: no second model call
    assert rh.runner is not None and rh.runner.supervisor is not None and rh.runner.supervisor.in_flight == 0
    parked = next(r for r in _outbox(rh, agent.conversation_id, Topics.RUN_COMPLETED) if isinstance(r, RunCompleted))
    assert parked.run_id == request.run_id and parked.abort_reason == "awaiting_approval" and parked.final_text is None
    # Waiting for the owner is not a fault: blocked, no error family (as a handoff waits for people).
    assert (parked.vitality, parked.error_family) == (Vitality.BLOCKED, None)
    decision_id = _rows(rh, org.org_id, "SELECT id FROM agent_decisions WHERE run_id = :r", r=request.run_id)[0]["id"]
    # The runs API shows the parked run as such, and can filter on it.
    shown = await api.get(f"/api/v1/runs/{request.run_id}", headers=org.headers())
    assert shown.status_code == 200 and shown.json()["data"]["status"] == "awaiting_approval", shown.text
    listed = await api.get("/api/v1/runs", params={"status": "awaiting_approval"}, headers=org.headers())
    assert [r["id"] for r in listed.json()["data"]] == [str(request.run_id)], listed.text

    answer = await api.post(f"/api/v1/decisions/{decision_id}:{decision}", headers=org.headers())
    assert answer.status_code == 200, answer.text
    # The Home card closes either way, and says which: approved is actioned, rejected dismissed.
    card = _rows(rh, org.org_id, "SELECT status FROM workspace_insights WHERE agent_decision_id = :d", d=decision_id)
    assert [c["status"] for c in card] == ["actioned" if decision == "approve" else "dismissed"]
    await _wait_status(rh, request, "aborted")  # no longer parked
    wake = _wakes(rh, agent)
    assert len(wake) == 1 and wake[0].wake_context.run_id == request.run_id
    assert (wake[0].target_agent_id, wake[0].target_version_id) == (agent.agent_id, agent.version_id)

    # The dispatcher's hop (issue 4's dispatcher turns a targeted dispatch into this run).
    resumed = run_request(agent, []).model_copy(
        update={"wake_reason": WakeReason.ASSIGNMENT, "wake_context": wake[0].wake_context}
    )
    mark = len(rh.fake.received)
    row = await rh.run(resumed)
    assert row.status == "completed" and row.final_text == "Resumed."
    last = json.dumps(rh.fake.received[mark].body)
    expected = '\\"status\\": \\"approved\\"' if decision == "approve" else '\\"status\\": \\"rejected\\"'
    assert expected in last, last[-600:]
    sent = _rows(
        rh, org.org_id, "SELECT 1 FROM messages WHERE run_id = :r AND direction = 'outbound'", r=request.run_id
    )
    assert len(sent) == (1 if decision == "approve" else 0)


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_a_decision_after_a_handoff_does_not_bring_the_agent_back(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle, decision: str
) -> None:
    """People took the conversation over while the run waited for the owner: the decision stands
    (an approved send is executed, once), the parked run is closed, and no wake is queued."""
    agent, request = await _parked(rh, org)
    _rows_exec(rh, org.org_id, "UPDATE conversations SET status = 'handoff' WHERE id = :c", c=agent.conversation_id)
    decision_id = _rows(rh, org.org_id, "SELECT id FROM agent_decisions WHERE run_id = :r", r=request.run_id)[0]["id"]
    answer = await api.post(f"/api/v1/decisions/{decision_id}:{decision}", headers=org.headers())
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["status"] == ("executed" if decision == "approve" else "rejected")
    await _wait_status(rh, request, "aborted")
    assert _wakes(rh, agent) == []


def _rows_exec(rh: RunnerHarness, org_id: uuid.UUID, sql: str, **params: Any) -> None:
    with Session(rh.db) as session, tenant_transaction(session, org_id):
        session.execute(text(sql), params)


async def test_pause_on_proposal_is_a_version_setting_of_the_agents_api(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle
) -> None:
    channel = agents.make_channel(org)
    created = await agents.create_agent(api, org, channel, pause_on_proposal=True)
    assert created["version"]["pause_on_proposal"] is True
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    draft = await agents.save_draft(api, org, agent_id, channel)
    assert draft["pause_on_proposal"] is False  # the default: a proposal never parks the run
    patched = await api.patch(
        f"/api/v1/agents/{agent_id}/versions/{draft['id']}", json={"pause_on_proposal": True}, headers=org.headers()
    )
    assert patched.status_code == 200 and patched.json()["data"]["pause_on_proposal"] is True, patched.text
    query = "SELECT id, pause_on_proposal FROM ai_agent_versions WHERE agent_id = :a"
    stored = _rows(rh, org.org_id, query, a=agent_id)
    assert {str(r["id"]): r["pause_on_proposal"] for r in stored} == {version_id: True, draft["id"]: True}


async def test_only_the_owners_wake_replays_the_decision_and_a_recovered_resume_still_does(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle
) -> None:
    """A follow-up the approved action scheduled fires later naming the run that created it: it
    must do its follow-up, not answer the approval again. A resume run whose runner died is
    recovered naming the lost attempt: the recovery still resumes with the owner's decision."""
    agent, request = await _parked(rh, org)
    decision_id = _rows(rh, org.org_id, "SELECT id FROM agent_decisions WHERE run_id = :r", r=request.run_id)[0]["id"]
    answer = await api.post(f"/api/v1/decisions/{decision_id}:approve", headers=org.headers())
    assert answer.status_code == 200, answer.text
    await _wait_status(rh, request, "aborted")
    [wake] = _wakes(rh, agent)
    approved = '\\"status\\": \\"approved\\"'

    follow_up = run_request(agent, []).model_copy(
        update={
            "wake_reason": WakeReason.FOLLOW_UP,
            "wake_context": WakeContext(follow_up_id=uuid.uuid4(), run_id=request.run_id),
        }
    )
    mark = len(rh.fake.received)
    assert (await rh.run(follow_up)).status == "completed"
    assert approved not in json.dumps(rh.fake.received[mark].body), "the follow-up replayed the approval"

    lost = run_request(agent, []).model_copy(
        update={"wake_reason": WakeReason.ASSIGNMENT, "wake_context": wake.wake_context}
    )
    _rows_exec(  # the resume run's runner died after its claim; the sweep closed it as lost
        rh,
        org.org_id,
        "INSERT INTO ai_agent_runs (id, org_id, agent_id, agent_version_id, conversation_id, status, wake_reason,"
        " wake_context, attempt) VALUES (:id, :o, :a, :v, :c, 'failed', 'assignment', CAST(:w AS jsonb), 1)",
        id=lost.run_id,
        o=org.org_id,
        a=agent.agent_id,
        v=agent.version_id,
        c=agent.conversation_id,
        w=lost.wake_context.model_dump_json(),
    )
    recovery = run_request(agent, [], attempt=2, parent_run_id=lost.run_id).model_copy(
        update={
            "wake_context": WakeContext(run_id=lost.run_id, assigned_by_user_id=wake.wake_context.assigned_by_user_id)
        }
    )
    mark = len(rh.fake.received)
    assert (await rh.run(recovery)).status == "completed"
    assert approved in json.dumps(rh.fake.received[mark].body), "the recovered resume lost the owner's decision"


@pytest.mark.parametrize(
    ("waited", "outcome"), [(timedelta(hours=5), "scheduled at the proposed time"), (timedelta(hours=17), "refused")]
)
async def test_an_approved_follow_up_is_due_when_the_agent_proposed_it_not_later(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle, waited: timedelta, outcome: str
) -> None:
    """The agent proposed "in 16 hours" on Friday at 17:00 (Saturday at 9:00); the owner approved on
    Monday. It was scheduled 16 hours after the approval — Tuesday at 2:00. Counted from the
    proposal: still due at its time, or refused when that time has passed."""
    agent = _agent(rh, org, SCHEDULE_FOLLOWUP, followup={"callback_enabled": True})
    rh.fake.script(_script(tool(SCHEDULE_FOLLOWUP, {"reason": "call back about the quote", "due_in_minutes": 960})))
    request = run_request(agent, [inbound(rh.db, agent, "Me liga amanhã de manhã?")])
    assert (await rh.run(request)).status == "completed"
    [decision] = _rows(rh, org.org_id, "SELECT id, created_at FROM agent_decisions WHERE run_id = :r", r=request.run_id)
    proposed_at = decision["created_at"] - waited  # as if the owner took that long to answer
    _rows_exec(
        rh, org.org_id, "UPDATE agent_decisions SET created_at = :at WHERE id = :d", at=proposed_at, d=decision["id"]
    )

    answer = await api.post(f"/api/v1/decisions/{decision['id']}:approve", headers=org.headers())
    assert answer.status_code == 200, answer.text
    scheduled = _rows(
        rh, org.org_id, "SELECT due_at FROM scheduled_followups WHERE created_by_run_id = :r", r=request.run_id
    )
    if outcome == "refused":
        assert scheduled == [] and answer.json()["data"]["status"] == "approved"
        return
    [followup] = scheduled
    assert abs(followup["due_at"] - (proposed_at + timedelta(minutes=960))) < timedelta(minutes=2)
