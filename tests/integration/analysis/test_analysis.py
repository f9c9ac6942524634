"""Scheduled analysis agents (issue 6 item 8, docs/analysis.md): a daily fan-out per org and local day,
exactly once with two schedulers; the run turns aggregated, PII-free data into insights; a re-run keeps
each insight's owner status."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, date, datetime
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from services.api.analysis.scheduler import AnalysisScheduler, due_orgs, pipeline_run_id
from switchboard.contracts import HandoffTriggered, Insight, Serde, Topics, WakeReason
from switchboard.db.models import (
    AiAgent,
    AiAgentRun,
    AnalysisClaim,
    Conversation,
    Organization,
    OutboxEvent,
    WorkspaceInsight,
)
from switchboard.db.session import create_async_engine, create_async_sessionmaker, tenant_transaction
from switchboard.internal_chats import ANALYSIS_CHAT_ID
from switchboard.tool_catalog import ANALYTICS_AREA_SUMMARY, INSIGHTS_PUBLISH, REQUEST_HUMAN_HANDOFF
from tests.integration.analysis.conftest import dispatches, run_for
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound
from tests.support.fake_llm import Reply, tool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ANALYST = "You are the daily analyst of the business. Publish what you find with insights_publish."
EMAIL, PHONE, NAME = "giulia.bianchi@example.it", "+393471234567", "Giulia Bianchi"


def analysis_agent(rh: RunnerHarness, time_zone: str = "UTC") -> Agent:
    agent = create_agent(rh.db, tool_ids=[ANALYTICS_AREA_SUMMARY, INSIGHTS_PUBLISH], system_prompt=ANALYST)
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(update(Organization).where(Organization.id == agent.org_id).values(time_zone=time_zone))
        # Published as the API publishes (the harness only marks the version).
        session.execute(
            update(AiAgent).where(AiAgent.id == agent.agent_id).values(published_version_id=agent.version_id)
        )
    return agent


def analysis_conversation(rh: RunnerHarness, org_id: uuid.UUID) -> uuid.UUID:
    with Session(rh.db) as session, tenant_transaction(session, org_id):
        return session.scalars(
            select(Conversation.id).where(Conversation.org_id == org_id, Conversation.chat_id == ANALYSIS_CHAT_ID)
        ).one()


def insights(rh: RunnerHarness, org_id: uuid.UUID) -> dict[str, WorkspaceInsight]:
    with Session(rh.db, expire_on_commit=False) as session, tenant_transaction(session, org_id):
        rows = session.scalars(select(WorkspaceInsight).where(WorkspaceInsight.org_id == org_id)).all()
        return {row.dedupe_key: row for row in rows}


def insight_records(rh: RunnerHarness, org_id: uuid.UUID) -> list[Insight]:
    serde = Serde.from_settings(rh.kafka)
    with Session(rh.db) as session:
        payloads = session.scalars(
            select(OutboxEvent.payload)
            .where(OutboxEvent.topic == Topics.INSIGHTS.name, OutboxEvent.key == str(org_id).encode())
            .order_by(OutboxEvent.id)
        ).all()
    return [serde.decode(Topics.INSIGHTS, p) for p in payloads]  # type: ignore[misc]


async def test_the_fan_out_fires_once_per_org_and_local_day_with_two_schedulers(rh: RunnerHarness) -> None:
    agent = analysis_agent(rh, "America/Sao_Paulo")  # UTC-3
    other = create_agent(rh.db, org_id=agent.org_id, api_key=None)  # customer-facing: not an analysis agent
    engine = create_async_engine(rh.database_url, pool_size=4)
    serde = Serde.from_settings(rh.kafka)
    first, second = (
        AnalysisScheduler(create_async_sessionmaker(engine), serde, local_hour=6),
        AnalysisScheduler(create_async_sessionmaker(engine), serde, local_hour=6),
    )
    org = [agent.org_id]
    try:
        # 05:59 in São Paulo: not due yet.
        early = datetime(2030, 3, 14, 8, 59, tzinfo=UTC)
        assert await asyncio.gather(first.tick(early, org), second.tick(early, org)) == [[], []]
        async with create_async_sessionmaker(engine)() as session:
            assert agent.org_id not in await session.run_sync(lambda s: due_orgs(s, early, 6, 100_000))
        # 06:30 local: both instances, three passes each, at the same instant.
        due = datetime(2030, 3, 14, 9, 30, tzinfo=UTC)
        async with create_async_sessionmaker(engine)() as session:
            assert agent.org_id in await session.run_sync(lambda s: due_orgs(s, due, 6, 100_000))
        passes = await asyncio.gather(*(s.tick(due, org) for s in (first, second, first, second, first, second)))
        fanned = [f for batch in passes for f in batch]
        assert [(f.org_id, f.day) for f in fanned] == [(agent.org_id, date(2030, 3, 14))]
        async with create_async_sessionmaker(engine)() as session:
            assert agent.org_id not in await session.run_sync(lambda s: due_orgs(s, due, 6, 100_000))
        # 23:00 local the same day (02:00Z the next UTC day): still the same local day, nothing.
        late = datetime(2030, 3, 15, 2, 0, tzinfo=UTC)
        assert await asyncio.gather(first.tick(late, org), second.tick(late, org)) == [[], []]
        # The next local day fires again, once.
        tomorrow = datetime(2030, 3, 15, 9, 10, tzinfo=UTC)
        again = await asyncio.gather(first.tick(tomorrow, org), second.tick(tomorrow, org))
        assert [f.day for batch in again for f in batch] == [date(2030, 3, 15)]
    finally:
        await engine.dispose()

    conversation_id = analysis_conversation(rh, agent.org_id)
    mine = [d for _, d in dispatches(rh, conversation_id) if (d.request_id or "").startswith("analysis:2030-03-1")]
    assert [(d.request_id, d.target_agent_id, d.target_version_id) for d in mine] == [
        (f"analysis:2030-03-14:{agent.agent_id}", agent.agent_id, None),
        (f"analysis:2030-03-15:{agent.agent_id}", agent.agent_id, None),
    ], "one dispatch per day, for the analysis agent only (its current published version)"
    assert all(d.wake_reason is WakeReason.PIPELINE_STEP for d in mine)
    assert mine[0].wake_context.pipeline_run_id == pipeline_run_id(agent.org_id, date(2030, 3, 14))
    assert other.agent_id not in {d.target_agent_id for _, d in dispatches(rh, conversation_id)}
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        claim = session.get_one(AnalysisClaim, (agent.org_id, date(2030, 3, 14)))
        assert (claim.conversation_id, claim.agents_dispatched) == (conversation_id, 1)
        conversation = session.get_one(Conversation, conversation_id)
        assert conversation.channel_session_id == agent.channel_session_id


def finding(key: str, title: str, body: str = "") -> dict[str, object]:
    return {
        "key": key,
        "area": "crm",
        "title": title,
        "body": body,
        "suggested_actions": [{"action_type": "crm_schedule_followup", "label": "Follow up", "arguments": {}}],
    }


async def analyse(rh: RunnerHarness, agent: Agent, now: datetime, items: list[dict[str, object]]) -> AiAgentRun:
    """One scheduled analysis: the fan-out's dispatch, the dispatcher's hop (tested on its own), the run."""
    engine = create_async_engine(rh.database_url, pool_size=2)
    try:
        [fanned] = await AnalysisScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka)).tick(
            now, [agent.org_id]
        )
    finally:
        await engine.dispose()
    [dispatch] = [
        d for _, d in dispatches(rh, analysis_conversation(rh, agent.org_id)) if d.event_id in fanned.dispatch_ids
    ]
    rh.fake.script(
        [
            tool(ANALYTICS_AREA_SUMMARY, {"area": "crm", "days": 7}),
            tool(INSIGHTS_PUBLISH, {"items": items}),
            Reply(text="Published."),
        ]
    )
    run = await rh.run(run_for(dispatch, agent.agent_id, agent.version_id))
    assert run.status == "completed" and run.wake_reason == "pipelineStep", run.error_message
    # An internal conversation: the run answers, but nothing is ever addressed to a customer.
    assert run.final_text == "Published." and run.would_send_to is None
    return run


async def test_an_analysis_run_publishes_insights_and_a_rerun_keeps_their_state(rh: RunnerHarness) -> None:
    agent = analysis_agent(rh)
    for body in (f"Hi, I am {NAME}, mail me at {EMAIL}", f"or call {PHONE}"):
        inbound(rh.db, agent, body)
    before = len(rh.fake.received)

    first = await analyse(
        rh,
        agent,
        datetime(2030, 5, 2, 7, 0, tzinfo=UTC),
        [finding("slow_replies", "Replies are slow"), finding("weekend_gap", "Nobody answers on weekends")],
    )
    found = insights(rh, agent.org_id)
    assert {k: (r.status, r.title, r.run_id, r.area) for k, r in found.items()} == {
        "analysis:crm:slow_replies": ("new", "Replies are slow", first.id, "crm"),
        "analysis:crm:weekend_gap": ("new", "Nobody answers on weekends", first.id, "crm"),
    }
    assert found["analysis:crm:slow_replies"].suggested_actions == [
        {"action_type": "crm_schedule_followup", "label": "Follow up", "arguments_json": "{}"}
    ]
    records = insight_records(rh, agent.org_id)
    assert sorted(r.insight_key for r in records) == ["analysis:crm:slow_replies", "analysis:crm:weekend_gap"]
    assert {r.run_id for r in records} == {first.id} and {r.agent_id for r in records} == {agent.agent_id}

    # The owner dismisses one insight and has seen the other.
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        for key, status in (("analysis:crm:slow_replies", "dismissed"), ("analysis:crm:weekend_gap", "seen")):
            session.execute(
                update(WorkspaceInsight)
                .where(WorkspaceInsight.org_id == agent.org_id, WorkspaceInsight.dedupe_key == key)
                .values(status=status, status_changed_at=datetime.now(UTC))
            )

    # The next day's analysis finds the same things (updated) and one new one.
    second = await analyse(
        rh,
        agent,
        datetime(2030, 5, 3, 7, 0, tzinfo=UTC),
        [
            finding("slow_replies", "Replies are still slow", "Median reply time went up"),
            finding("weekend_gap", "Nobody answers on weekends"),
            finding("new_leads", "More new leads than last week"),
        ],
    )
    found = insights(rh, agent.org_id)
    assert {k: (r.status, r.title, r.run_id) for k, r in found.items()} == {
        "analysis:crm:slow_replies": ("dismissed", "Replies are still slow", second.id),
        "analysis:crm:weekend_gap": ("seen", "Nobody answers on weekends", second.id),
        "analysis:crm:new_leads": ("new", "More new leads than last week", second.id),
    }
    assert found["analysis:crm:slow_replies"].body == "Median reply time went up"
    latest = {r.insight_key: r.status.value for r in insight_records(rh, agent.org_id) if r.run_id == second.id}
    assert latest == {
        "analysis:crm:slow_replies": "dismissed",
        "analysis:crm:weekend_gap": "seen",
        "analysis:crm:new_leads": "new",
    }, "the records tell the brief the owner's status, so the digest does not reopen a dismissed insight"

    # The data tool's answer held counts only: no raw PII in it, nor in anything sent to the model.
    results = [step["result"] for step in first.tool_calls if step.get("tool_name") == ANALYTICS_AREA_SUMMARY]
    summary = json.loads(results[0]) if isinstance(results[0], str) else results[0]
    assert summary["area"] == "crm" and summary["org_activity"]["messages_inbound"] >= 2
    everything = [json.dumps(r.body) for r in rh.fake.received[before:]] + [json.dumps(summary)]
    for secret in (EMAIL, PHONE, NAME, "Giulia", "3471234567"):
        assert not any(secret in blob for blob in everything), secret


async def test_the_data_tool_refuses_an_unknown_area_and_publish_validates_items(rh: RunnerHarness) -> None:
    agent = analysis_agent(rh)
    rh.fake.script(
        [
            tool(ANALYTICS_AREA_SUMMARY, {"area": "payroll", "days": 7}),
            tool(INSIGHTS_PUBLISH, {"items": [{"key": "Bad Key!", "area": "crm", "title": "x"}]}),
            Reply(text="Done."),
        ]
    )
    engine = create_async_engine(rh.database_url, pool_size=2)
    try:
        [fanned] = await AnalysisScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka)).tick(
            datetime(2030, 7, 1, 12, 0, tzinfo=UTC), [agent.org_id]
        )
    finally:
        await engine.dispose()
    [dispatch] = [d for _, d in dispatches(rh, analysis_conversation(rh, agent.org_id))]
    assert dispatch.event_id in fanned.dispatch_ids
    run = await rh.run(run_for(dispatch, agent.agent_id, agent.version_id))
    assert run.status == "completed"
    errors = [step for step in run.tool_calls if step.get("is_error")]
    assert [step["tool_name"] for step in errors] == [ANALYTICS_AREA_SUMMARY, INSIGHTS_PUBLISH]
    assert insights(rh, agent.org_id) == {}


async def test_an_analysis_run_that_asks_for_a_person_does_not_park_the_analysis_for_good(
    rh: RunnerHarness,
) -> None:
    """No person answers the internal analysis conversation, and it is not in the inbox: a handoff
    there (the model's request_human_handoff, or the tool server down during a deploy) set it to
    ``handoff`` for good, and the dispatcher refused every later day's analysis. The run ends
    aborted instead, nothing is handed to anyone, and the conversation stays open."""
    agent = create_agent(
        rh.db, tool_ids=[ANALYTICS_AREA_SUMMARY, INSIGHTS_PUBLISH], system_prompt=ANALYST, handoff_tool_enabled=True
    )
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            update(AiAgent).where(AiAgent.id == agent.agent_id).values(published_version_id=agent.version_id)
        )
    fanned = await _fan_out(rh, agent)
    conversation_id = analysis_conversation(rh, agent.org_id)
    [dispatch] = [d for _, d in dispatches(rh, conversation_id) if d.event_id in fanned.dispatch_ids]
    rh.fake.script([tool(REQUEST_HUMAN_HANDOFF, {"reason": "the figures look wrong", "urgency": "normal"})])
    run = await rh.run(run_for(dispatch, agent.agent_id, agent.version_id))
    assert (run.status, run.abort_reason) == ("aborted", "handoff_unavailable")
    assert "the figures look wrong" in (run.summary or "")
    records = rh.outbox(conversation_id)
    assert not any(isinstance(r, HandoffTriggered) for _, r in records), "nobody is handed an internal conversation"
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get_one(Conversation, conversation_id).status == "open"


async def test_the_internal_analysis_conversation_cannot_be_taken_over_nor_written_to(rh: RunnerHarness) -> None:
    """It is not in the inbox, and nobody is on the other end: taken over (its id is in the run log),
    every later day's analysis was refused; a person's message went to a "switchboard-..." chat."""
    from services.api.conversations.replies import send_human_message
    from services.api.conversations.service import take_over
    from services.api.core.errors import NotFound

    agent = analysis_agent(rh)
    await _fan_out(rh, agent)
    conversation_id = analysis_conversation(rh, agent.org_id)
    serde = Serde.from_settings(rh.kafka)
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        with pytest.raises(NotFound):
            take_over(
                session,
                serde,
                org_id=agent.org_id,
                conversation_id=conversation_id,
                actor_user_id=None,
                request_id=None,
            )
        with pytest.raises(NotFound):
            send_human_message(
                session,
                serde,
                org_id=agent.org_id,
                conversation_id=conversation_id,
                text="oi",
                actor_user_id=None,
                idempotency_key=None,
                request_id=None,
            )
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get_one(Conversation, conversation_id).status == "open"


async def test_an_analysis_conversation_parked_before_the_fix_is_given_back_without_a_wake(rh: RunnerHarness) -> None:
    """An org whose analysis conversation a handoff parked (before runs there stopped handing off) is
    given back with ``:handback``: reopened, and no agent woken — an untargeted wake would run a
    customer-facing agent in the analysis chat, billed, its reply going nowhere."""
    from services.api.conversations.service import hand_back

    agent = analysis_agent(rh)
    await _fan_out(rh, agent)
    conversation_id = analysis_conversation(rh, agent.org_id)
    wakes_before = len(dispatches(rh, conversation_id))
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(update(Conversation).where(Conversation.id == conversation_id).values(status="handoff"))
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        hand_back(
            session,
            Serde.from_settings(rh.kafka),
            org_id=agent.org_id,
            conversation_id=conversation_id,
            actor_user_id=None,
            request_id=None,
        )
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get_one(Conversation, conversation_id).status == "open"
    assert len(dispatches(rh, conversation_id)) == wakes_before, "no agent woken in the analysis chat"


async def _fan_out(rh: RunnerHarness, agent: Agent) -> Any:
    """The 2030-05-02 07:00 UTC fan-out for ``agent``'s org; what it fanned out."""
    engine = create_async_engine(rh.database_url, pool_size=2)
    try:
        [fanned] = await AnalysisScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka)).tick(
            datetime(2030, 5, 2, 7, 0, tzinfo=UTC), [agent.org_id]
        )
    finally:
        await engine.dispose()
    return fanned


def test_the_activity_an_analysis_reads_is_the_customers_not_the_editors_tests(rh: RunnerHarness) -> None:
    """An owner testing a version all day wrote many messages in test chats (``switchboard-test-…``):
    they read to the analysis as customer activity ("inbound up 40%"). Only customers' count."""
    from dataclasses import replace as dc_replace

    from services.api.mcp.analysis_tools import area_summary

    agent = analysis_agent(rh)
    inbound(rh.db, agent, "a customer writes")
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        customer = session.get_one(Conversation, agent.conversation_id)
        customer.last_message_at = datetime.now(UTC)
        test_chat = Conversation(
            org_id=agent.org_id,
            channel_session_id=customer.channel_session_id,
            contact_id=customer.contact_id,
            chat_id=f"switchboard-test-{uuid.uuid4().hex[:8]}",
            last_message_at=datetime.now(UTC),
        )
        session.add(test_chat)
        session.flush()
        tester = dc_replace(agent, conversation_id=test_chat.id)
    for n in range(5):
        inbound(rh.db, tester, f"the editor's test {n}")
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        activity = area_summary(session, agent.org_id, "crm", 7, datetime.now(UTC))["org_activity"]
    assert (activity["messages_inbound"], activity["conversations_active"]) == (1, 1)


async def test_one_orgs_failing_fan_out_does_not_hold_back_the_others(
    rh: RunnerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One org's fan-out fails (its transaction rolls back, nothing claimed): it is tried again next
    pass, and the orgs after it in this pass still get their analysis — the whole pass stopped."""
    from services.api.analysis import scheduler as scheduler_module

    failing, fine = analysis_agent(rh), analysis_agent(rh)
    real = scheduler_module.fan_out_org

    def fan_out_org(session: Any, serde: Any, org_id: Any, *args: Any) -> Any:
        if org_id == failing.org_id:
            raise RuntimeError("this org's data trips a bug")
        return real(session, serde, org_id, *args)

    monkeypatch.setattr(scheduler_module, "fan_out_org", fan_out_org)
    engine = create_async_engine(rh.database_url, pool_size=2)
    try:
        fanned = await AnalysisScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka)).tick(
            datetime(2030, 5, 2, 7, 0, tzinfo=UTC), [failing.org_id, fine.org_id]
        )
    finally:
        await engine.dispose()
    assert [f.org_id for f in fanned] == [fine.org_id]
