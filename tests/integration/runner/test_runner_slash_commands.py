"""Slash commands end to end (issue 6 item 4): /compact, /plan, /goal and /loop budgets, /skill:<name>.

Real broker and database, the real MCP tool server, the model faked at its HTTP API. Where the
dispatcher would turn a ``dispatch_requested`` into a ``run_requested`` (the next goal segment),
the test does it by hand from the outbox row, as the dispatcher does.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from services.api.conversations.commands import CommandSent, send_command
from services.api.webhooks.schemas import WahaEvent
from services.api.webhooks.service import ingest_message
from services.runner.goals import GOAL_COMPLETE
from services.runner.plan import SUBMIT_PLAN
from services.runner.providers.demo import SUMMARY_TASK
from services.runner.summary import MAX_BATCH_MESSAGES
from switchboard.contracts import DispatchRequested, RunRequested, Serde, Topics
from switchboard.contracts.enums import WakeReason
from switchboard.db.lookups import ChannelSessionRoute
from switchboard.db.models import AiAgentRun, AiAgentVersion, Message, OutboxEvent
from switchboard.db.models.slash import AgentSkill, ConversationGoal
from switchboard.db.session import tenant_transaction
from switchboard.tool_catalog import SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE
from tests.integration.runner.harness import Agent, RunnerHarness, command, create_agent, inbound, run_request
from tests.support.fake_llm import Received, Reply, tool

pytestmark = pytest.mark.integration


def _tools(received: Received) -> set[str]:
    return {t["name"] for t in received.body.get("tools", [])}


def _user_texts(received: Received) -> str:
    return json.dumps(received.body.get("messages", []))


def _outbox(rh: RunnerHarness, agent: Agent, topic: Any) -> list[Any]:
    serde = Serde.from_settings(rh.kafka)
    with Session(rh.db) as session:
        payloads = session.scalars(
            select(OutboxEvent.payload)
            .where(OutboxEvent.key == str(agent.conversation_id).encode(), OutboxEvent.topic == topic.name)
            .order_by(OutboxEvent.id)
        ).all()
    return [serde.decode(topic, bytes(p)) for p in payloads]


def _layers(row: AiAgentRun) -> dict[str, str]:
    assert row.prompt is not None
    return {layer["label"]: layer["text"] for layer in row.prompt["layers"]}


# ---------------------------------------------------------------------------------------------- /compact


def _ingest(rh: RunnerHarness, agent: Agent, body: str, message_id: str, *, from_me: bool = True) -> Any:
    """``body`` as WAHA delivers it: by default the owner writing from the business phone."""
    business = "5511900000000@c.us"
    event = WahaEvent(
        event="message.any" if from_me else "message",
        session="default",
        payload={
            "id": message_id,
            "timestamp": 1767225600,
            "from": business if from_me else agent.chat_id,
            "to": agent.chat_id if from_me else business,
            "fromMe": from_me,
            "body": body,
        },
    )
    route = ChannelSessionRoute(channel_session_id=agent.channel_session_id, org_id=agent.org_id, status="working")
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        return ingest_message(session, route=route, event=event, serde=Serde.from_settings(rh.kafka), request_id=None)


async def test_compact_summarizes_now_and_never_reaches_the_model_nor_the_messages_table(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    for i in range(4):
        inbound(rh.db, agent, f"question {i} about the blue sofa")
        inbound(rh.db, agent, f"answer {i}: it is in stock", direction="outbound")
    rh.fake.script([Reply(text="Hello!")])
    await rh.run(run_request(agent, [inbound(rh.db, agent, "hi again")]))
    assert rh.runner is not None and rh.runner.summarizer is not None
    await rh.runner.summarizer.wait_idle()  # within the window: the background job summarized nothing
    assert rh.scalar(agent.org_id, "SELECT count(*) FROM conversation_summaries") == 0

    result = _ingest(rh, agent, "/compact", f"false_{agent.chat_id}_C1")
    again = _ingest(rh, agent, "/compact", f"false_{agent.chat_id}_C1")  # WAHA redelivers

    assert result.reason == "slash_compact" and result.message_id is None and not result.dispatched
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        bodies = session.scalars(select(Message.body).where(Message.conversation_id == agent.conversation_id)).all()
    assert "/compact" not in bodies and len(bodies) == 9
    assert _outbox(rh, agent, Topics.DISPATCH_REQUESTED) == []  # no agent turn is dispatched
    requested = _outbox(rh, agent, Topics.RUN_REQUESTED)
    assert again.reason == "slash_compact"
    assert len(requested) == 2 and requested[0].run_id == requested[1].run_id  # a redelivery is the same run
    compact: RunRequested = requested[0]

    rh.fake.script(lambda r: Reply(text="The customer asked about the blue sofa; it is in stock."))
    before = len(rh.fake.received)
    row = await rh.run(compact)

    assert row.status == "completed" and row.vitality == "completed"
    assert row.final_text is None and row.would_send_to is None  # nothing is sent to anyone
    assert "/compact" in (row.summary or "")
    # The summarization is the run's work: its spend shows on the run and counts for its agent.
    assert row.tokens_in > 0 and row.tokens_out > 0 and row.cost_micros > 0 and row.steps_count == 1
    [done] = [r for r in _outbox(rh, agent, Topics.RUN_COMPLETED) if r.run_id == compact.run_id]
    assert (done.tokens_in, done.cost_micro_usd) == (row.tokens_in, row.cost_micros)
    agentless = "SELECT count(*) FROM usage_entries WHERE agent_id IS NULL AND created_at > now() - interval '1 minute'"
    assert rh.scalar(agent.org_id, agentless) == 0, "not counted a second time as the org's own"
    sent = rh.fake.received[before:]
    assert len(sent) == 1 and SUMMARY_TASK in json.dumps(sent[0].body)  # only the summarization request
    assert all("/compact" not in json.dumps(r.body) for r in rh.fake.received)
    assert rh.scalar(agent.org_id, "SELECT messages_covered FROM conversation_summaries") == 9
    assert "blue sofa" in rh.scalar(agent.org_id, "SELECT summary FROM conversations")

    # The next turn: the summary stands for every message it covers, the recent ones too — they are
    # in the Memory layer, not repeated verbatim in the transcript (the claim reads the coverage).
    rh.fake.script([Reply(text="The red one too.")])
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "and the red sofa?")]))
    (turn,) = rh.fake.received[before:]
    assert "the red sofa?" in _user_texts(turn)
    assert "question 3 about the blue sofa" not in _user_texts(turn) and "hi again" not in _user_texts(turn)
    layers = _layers(row)
    assert "it is in stock" in layers["Memory"] and "latest 0 earlier message(s)" in layers["Conversation"]


async def test_a_compaction_that_fails_midway_still_counts_what_its_passes_spent(rh: RunnerHarness) -> None:
    """A long thread takes several passes; the provider refuses the second. The first pass was
    billed: the run counts it (it was recorded failed at $0) and ends failed, not silently."""
    agent = create_agent(rh.db)
    for i in range(2 * MAX_BATCH_MESSAGES + 30):  # more than the background job and one pass fold
        inbound(rh.db, agent, f"message {i}")
    rh.fake.script([Reply(text="Hello!")])
    await rh.run(run_request(agent, [inbound(rh.db, agent, "hi")]))
    assert rh.runner is not None and rh.runner.summarizer is not None
    await rh.runner.summarizer.wait_idle()
    _ingest(rh, agent, "/compact", f"false_{agent.chat_id}_C9")
    compact: RunRequested = _outbox(rh, agent, Topics.RUN_REQUESTED)[-1]
    rh.fake.script(
        [Reply(text="Summary of the first messages.", input_tokens=900, output_tokens=60), Reply(status=400)]
    )
    row = await rh.run(compact)
    assert (row.status, row.error_code) == ("failed", "provider_bad_request")
    assert row.steps_count == 1 and (row.tokens_in, row.tokens_out) == (900, 60) and row.cost_micros > 0
    [done] = [r for r in _outbox(rh, agent, Topics.RUN_COMPLETED) if r.run_id == compact.run_id]
    assert done.cost_micro_usd == row.cost_micros


async def test_a_customers_compact_is_an_ordinary_message(rh: RunnerHarness) -> None:
    """A summarization run is billed to the business: a customer typing /compact must not start one."""
    agent = create_agent(rh.db)
    rh.fake.script([Reply(text="Hello!")])
    await rh.run(run_request(agent, [inbound(rh.db, agent, "hi")]))

    result = _ingest(rh, agent, "/compact", f"false_{agent.chat_id}_C3", from_me=False)

    assert result.reason is None and result.dispatched and result.message_id is not None
    assert _outbox(rh, agent, Topics.RUN_REQUESTED) == []
    (dispatched,) = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)
    assert dispatched.message.text == "/compact" and not dispatched.message.from_me
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get(Message, result.message_id) is not None


async def test_compact_where_no_agent_ever_ran_has_nothing_to_compact(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    result = _ingest(rh, agent, "/compact", f"false_{agent.chat_id}_C2")
    assert result.reason == "slash_compact_nothing" and not result.dispatched
    assert _outbox(rh, agent, Topics.RUN_REQUESTED) == [] and _outbox(rh, agent, Topics.DISPATCH_REQUESTED) == []
    assert rh.scalar(agent.org_id, "SELECT count(*) FROM messages") == 0


# ---------------------------------------------------------------------------------------------- /plan


async def test_plan_mode_read_only_tools_submit_plan_empty_without_a_plan_and_plan_off(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE])
    plan = "1. Find the customer's last order\n2. Offer the blue sofa at list price"
    rh.fake.script([tool(SUBMIT_PLAN, {"plan": plan})])
    before = len(rh.fake.received)
    first = await rh.run(run_request(agent, [command(rh.db, agent, "/plan win back the customer")]))

    request = rh.fake.received[before]
    assert _tools(request) == {SEARCH_CONTACTS, SUBMIT_PLAN}  # read-only plus submit_plan
    assert "win back the customer" in _user_texts(request) and "/plan" not in _user_texts(request)
    assert first.status == "completed" and first.vitality == "completed"
    assert first.final_text == plan and plan in (first.summary or "")
    assert any(e.get("tool_name") == SUBMIT_PLAN and e["args"]["plan"] == plan for e in first.tool_calls)  # trace
    assert _layers(first)["Run contract"].startswith("Mode: plan.")
    assert rh.scalar(agent.org_id, "SELECT mode FROM conversation_modes") == "plan"

    # The next message, without /plan, is still a plan turn; answering without a plan is an empty run.
    rh.fake.script([Reply(text="Sure, I will send the offer now!")])
    before = len(rh.fake.received)
    chatty = await rh.run(run_request(agent, [inbound(rh.db, agent, "ok go ahead")]))
    assert _tools(rh.fake.received[before]) == {SEARCH_CONTACTS, SUBMIT_PLAN}
    assert (chatty.status, chatty.vitality, chatty.error_family) == ("completed", "empty", "silentRun")
    assert chatty.final_text is None and chatty.would_send_to is None
    assert "no plan was submitted" in (chatty.summary or "")

    # /plan off: a clear reply without a model call, and the next turn has every granted tool again.
    before = len(rh.fake.received)
    off = await rh.run(run_request(agent, [command(rh.db, agent, "/plan off")]))
    assert len(rh.fake.received) == before and off.final_text and "Plan mode is off" in off.final_text
    assert rh.scalar(agent.org_id, "SELECT count(*) FROM conversation_modes") == 0
    rh.fake.script([Reply(text="Hi!")])
    await rh.run(run_request(agent, [inbound(rh.db, agent, "hello")]))
    assert SEND_WHATSAPP_MESSAGE in _tools(rh.fake.received[before])


# ---------------------------------------------------------------------------------------------- /goal


# The prompt's last layer, "Now" (services/runner/clock.py): its length changes with the weekday's
# name, and the budgets below are measured to the token.
_NOW_LAYER = re.compile(r'\\n\\n## Now\\n[^"]*')


def _honest_worker(received: Received) -> Reply:
    """Reports no more tokens than it was sent / allowed (the clock's line left out, its length varies
    with the day); 3 tool steps, then a progress note."""
    body = received.body
    sent = _NOW_LAYER.sub("", json.dumps(body))
    usage = {"input_tokens": len(sent) // 4, "output_tokens": int(body.get("max_tokens", 64))}
    done_steps = json.dumps(body.get("messages", [])).count('"tool_result"')
    if done_steps >= 3:
        return Reply(text="Progress: 3 leads checked.", **usage)
    return Reply(calls=tool(SEARCH_CONTACTS, {"query": f"lead {done_steps}"}).calls, **usage)


def _next_segment(wake: DispatchRequested) -> RunRequested:
    """What the dispatcher makes of a segment's wake (targeted: no trigger selection)."""
    assert wake.target_agent_id is not None and wake.target_version_id is not None
    return RunRequested(
        org_id=wake.org_id,
        request_id=wake.request_id,
        conversation_id=wake.conversation_id,
        contact_id=wake.contact_id,
        channel_session_id=wake.channel_session_id,
        run_id=uuid.uuid4(),
        agent_id=wake.target_agent_id,
        version_id=wake.target_version_id,
        wake_reason=wake.wake_reason,
        wake_context=wake.wake_context,
    )


async def test_goal_runs_in_segments_and_never_exceeds_its_budget(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS], max_steps=25, token_budget=500_000)
    rh.fake.script(_honest_worker)
    budget = 80_000  # --budget 0.08, in micro-USD ($1 in / $5 out per million tokens)
    before = len(rh.fake.received)
    runs = [await rh.run(run_request(agent, [command(rh.db, agent, "/goal answer every lead --budget 0.08")]))]
    first_request = rh.fake.received[before]
    assert "answer every lead" in _user_texts(first_request) and "/goal" not in _user_texts(first_request)
    assert GOAL_COMPLETE in _tools(first_request)
    directive = _layers(runs[0])["Directive"]
    assert directive.startswith("Goal: answer every lead") and "$0.08" in directive
    assert _layers(runs[0])["Run contract"].startswith("Mode: goal.")

    seen = 0
    for _ in range(25):  # bounded: the goal itself stops after 20 segments at most
        wakes = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)
        if len(wakes) == seen:
            break
        wake = wakes[-1]
        seen = len(wakes)
        assert wake.wake_reason is WakeReason.PIPELINE_STEP
        runs.append(await rh.run(_next_segment(wake)))

    with Session(rh.db, expire_on_commit=False) as session, tenant_transaction(session, agent.org_id):
        goal = session.scalars(
            select(ConversationGoal).where(ConversationGoal.conversation_id == agent.conversation_id)
        ).one()
    costs = [r.cost_micros for r in runs]
    assert len(runs) >= 2 and goal.segments == len(runs)
    assert goal.status == "budget_spent" and goal.budget_micros == budget
    assert sum(costs) == goal.spent_micros <= budget  # never exceeded, let alone by a whole segment
    assert all(0 < c <= 5_000_000 for c in costs)
    wakes = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)
    assert {w.wake_context.pipeline_run_id for w in wakes} == {goal.id}
    assert all(r.wake_reason == "pipelineStep" for r in runs[1:])
    assert all("Goal segment" in (r.summary or "") for r in runs)  # visible in the run log
    # The last segment had less than its share left: the 80% nudge came, then the budget guard stopped it.
    last = runs[-1]
    assert any(e.get("kind") == "guard" and e.get("name") == "goal_budget_nudge" for e in last.tool_calls)
    assert last.abort_reason == "cost_budget_exceeded"


def _record_lost(rh: RunnerHarness, agent: Agent, lost: RunRequested, *, spent_micros: int = 0) -> None:
    """``lost``'s row as its dead runner left it: claimed, never finished (the recovery closes it),
    having spent ``spent_micros`` (its last trace flush)."""
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.add(
            AiAgentRun(
                id=lost.run_id,
                org_id=agent.org_id,
                agent_id=agent.agent_id,
                agent_version_id=agent.version_id,
                conversation_id=agent.conversation_id,
                status="running",
                wake_reason=lost.wake_reason.value,
                wake_context=lost.wake_context.model_dump(mode="json", exclude_none=True),
                attempt=lost.attempt,
                heartbeat_at=datetime.now(UTC) - timedelta(minutes=5),
                cost_micros=spent_micros,
            )
        )


def _recovery_of(lost: RunRequested) -> RunRequested:
    """What the dispatcher sends when ``lost``'s lease lapsed (services/dispatcher/recovery.py)."""
    return lost.model_copy(
        update={
            "run_id": uuid.uuid4(),
            "attempt": lost.attempt + 1,
            "parent_run_id": lost.run_id,
            "wake_reason": WakeReason.RECOVERY,
            "wake_context": lost.wake_context.model_copy(update={"run_id": lost.run_id}),
        }
    )


def _goal(rh: RunnerHarness, agent: Agent) -> ConversationGoal:
    with Session(rh.db, expire_on_commit=False) as session, tenant_transaction(session, agent.org_id):
        return session.scalars(
            select(ConversationGoal).where(ConversationGoal.conversation_id == agent.conversation_id)
        ).one()


async def test_a_recovered_segment_is_the_goals_segment_and_a_recovered_goal_start_keeps_its_goal(
    rh: RunnerHarness,
) -> None:
    """A segment whose runner died (or handed it back at a rolling deploy) is recovered with wake
    reason ``recovery``: it runs as the goal's segment — its budget and Directive, its spend on the
    goal, the next segment queued — not as a plain reply turn that leaves the goal active for good.
    A recovered ``/goal`` start finds the goal its lost attempt started instead of replacing it."""
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([Reply(text="Progress: started.")])
    start = run_request(agent, [command(rh.db, agent, "/goal answer every lead --budget 1")])
    await rh.run(start)
    first = _goal(rh, agent)
    (wake,) = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)

    lost_segment = _next_segment(wake)
    _record_lost(rh, agent, lost_segment)
    rh.fake.script([Reply(text="Progress: two leads answered.")])
    recovered = await rh.run(_recovery_of(lost_segment))
    assert _layers(recovered)["Directive"].startswith("Goal: answer every lead")
    assert "Goal segment" in (recovered.summary or "")
    goal = _goal(rh, agent)
    assert (goal.id, goal.segments, goal.last_run_id) == (first.id, 2, recovered.id)
    assert goal.spent_micros == first.spent_micros + recovered.cost_micros
    assert len(_outbox(rh, agent, Topics.DISPATCH_REQUESTED)) == 2, "the next segment is queued"

    other = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    lost_start = run_request(other, [command(rh.db, other, "/goal call the new leads --budget 1")])
    rh.fake.script([Reply(text="Progress: started.")])
    await rh.run(lost_start)  # it started its goal; then its runner died before its finish (below)
    started = _goal(rh, other)
    rh.scalar(
        other.org_id,
        "UPDATE ai_agent_runs SET status = 'running', completed_at = NULL, heartbeat_at = now() - interval '5 minutes'"
        " WHERE id = :r RETURNING id",
        r=lost_start.run_id,
    )
    rh.fake.script([Reply(text="Progress: resumed.")])
    await rh.run(_recovery_of(lost_start))
    goals = rh.scalar(other.org_id, "SELECT json_agg(json_build_array(id, status)) FROM conversation_goals")
    assert goals == [[str(started.id), "active"]], "the recovery kept the goal its lost attempt started"


async def test_a_recovered_segment_charges_what_its_lost_attempt_spent_to_the_goal(rh: RunnerHarness) -> None:
    """A segment spent 90 cents of a $1 goal, then its runner died (or handed it back at a rollout):
    the recovery charges those 90 cents to the goal before it works, so it gets what is left of
    the budget — not a fresh dollar, again at every handback — and a second delivery of the same
    recovery charges nothing more."""
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([Reply(text="Progress: started.")])
    await rh.run(run_request(agent, [command(rh.db, agent, "/goal answer every lead --budget 1")]))
    first = _goal(rh, agent)
    (wake,) = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)

    lost_segment = _next_segment(wake)
    _record_lost(rh, agent, lost_segment, spent_micros=900_000)
    rh.fake.script([Reply(text="Progress: one more lead.")])
    recovery = _recovery_of(lost_segment)
    recovered = await rh.run(recovery)
    goal = _goal(rh, agent)
    assert goal.spent_micros == first.spent_micros + 900_000 + recovered.cost_micros
    left = 1_000_000 - first.spent_micros - 900_000
    assert f"${left / 1_000_000:.2f}" in _layers(recovered)["Directive"], "the segment works with what is left"
    assert goal.segments == 2, "the lost attempt is no segment of its own: its recovery is"

    again = await rh.run(recovery)  # the same recovery delivered again: a duplicate, nothing charged twice
    assert again.id == recovered.id
    assert _goal(rh, agent).spent_micros == goal.spent_micros


async def test_goal_complete_ends_the_goal_and_a_new_message_is_a_normal_turn(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([tool(GOAL_COMPLETE, {"report": "All 3 leads answered."})])
    row = await rh.run(run_request(agent, [command(rh.db, agent, "/loop")]))
    assert row.final_text == "All 3 leads answered." and row.status == "completed"
    assert rh.scalar(agent.org_id, "SELECT status FROM conversation_goals") == "done"
    assert rh.scalar(agent.org_id, "SELECT kind FROM conversation_goals") == "loop"
    assert _outbox(rh, agent, Topics.DISPATCH_REQUESTED) == []  # done: no next segment


async def test_goal_stop_ends_the_autonomous_work_without_a_model_call(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([Reply(text="Progress: started.")])
    await rh.run(run_request(agent, [command(rh.db, agent, "/goal answer every lead")]))
    (wake,) = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)
    before = len(rh.fake.received)
    stop = await rh.run(run_request(agent, [command(rh.db, agent, "/goal stop")]))
    assert len(rh.fake.received) == before and stop.final_text == "Stopped the autonomous work."
    assert rh.scalar(agent.org_id, "SELECT status FROM conversation_goals") == "stopped"
    # The wake already queued for the next segment finds no active goal: no turn at all (no model
    # call, nothing for the customer), and no new segment.
    before = len(rh.fake.received)
    late = await rh.run(_next_segment(wake))
    assert len(rh.fake.received) == before, "a stopped goal's queued segment calls no model"
    assert (late.status, late.final_text) == ("completed", None)
    assert "Goal segment not run" in (late.summary or "")
    assert len(_outbox(rh, agent, Topics.DISPATCH_REQUESTED)) == 1


async def test_a_goal_stopped_while_its_segment_runs_still_counts_what_the_segment_spent(rh: RunnerHarness) -> None:
    """The owner stops the goal (``POST /api/v1/goals/{id}:stop`` or ``/goal stop``) while a segment
    is at work: the segment finishes, its spend is the goal's, and no next segment starts."""
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])

    def stopped_meanwhile(received: Received) -> Reply:
        rh.scalar(
            agent.org_id, "UPDATE conversation_goals SET status = 'stopped', end_reason = 'by the owner' RETURNING id"
        )
        return Reply(text="Progress: two leads answered.")

    rh.fake.script(stopped_meanwhile)
    row = await rh.run(run_request(agent, [command(rh.db, agent, "/goal answer every lead")]))
    assert row.status == "completed" and row.cost_micros > 0
    with Session(rh.db, expire_on_commit=False) as session, tenant_transaction(session, agent.org_id):
        goal = session.scalars(
            select(ConversationGoal).where(ConversationGoal.conversation_id == agent.conversation_id)
        ).one()
    assert (goal.status, goal.end_reason) == ("stopped", "by the owner")
    assert (goal.spent_micros, goal.segments, goal.last_run_id) == (row.cost_micros, 1, row.id)
    assert _outbox(rh, agent, Topics.DISPATCH_REQUESTED) == []  # nothing follows a stopped goal


def _through_the_api(rh: RunnerHarness, agent: Agent, text: str) -> CommandSent:
    """``POST /api/v1/conversations/{id}/commands``'s transaction (stored and dispatched)."""
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        return send_command(
            session,
            Serde.from_settings(rh.kafka),
            org_id=agent.org_id,
            conversation_id=agent.conversation_id,
            text=text,
            actor_user_id=None,
            idempotency_key=None,
            request_id=f"req-{uuid.uuid4().hex[:8]}",
        )


async def test_a_goal_sent_through_the_api_runs_like_one_typed_on_the_phone_and_the_customer_never_sees_it(
    rh: RunnerHarness,
) -> None:
    """``POST /api/v1/conversations/{id}/commands``: the command reaches the agent as the business's
    (``from_me``) without being written into the customer's chat."""
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    sent = _through_the_api(rh, agent, "/goal answer every lead --budget 2")
    (wake,) = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)
    assert wake.message is not None and wake.message.from_me and wake.message.message_id == sent.message_id
    # What the dispatcher makes of it: the conversation's agent answers the stored message.
    request = run_request(agent, [wake.message])
    rh.fake.script([Reply(text="On it: two leads answered so far.")])
    row = await rh.run(request)
    assert "answer every lead" in _user_texts(rh.fake.received[-1]) and "/goal" not in _user_texts(rh.fake.received[-1])
    assert _layers(row)["Directive"].startswith("Goal: answer every lead")
    assert rh.scalar(agent.org_id, "SELECT budget_micros FROM conversation_goals") == 2_000_000
    # Stored as the business's message, never sent: no delivery, and its status says so.
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        stored = session.get_one(Message, sent.message_id)
        assert (stored.direction, stored.sender, stored.delivery_status) == ("outbound", "human", "received")
        assert (stored.attributes, stored.from_me) == ({"command": "api"}, True)
        # Its own id: the same command typed on the phone later is never taken for its echo.
        assert stored.external_id == f"api-command.{sent.message_id}"


async def test_a_command_through_the_api_keeps_its_acknowledgement_out_of_the_customers_chat(
    rh: RunnerHarness,
) -> None:
    """``/goal stop`` typed on the phone is answered in the chat (the customer saw the command);
    sent through the API, the customer never saw it: the acknowledgement stays in the run's summary."""
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    _through_the_api(rh, agent, "/goal stop")
    (wake,) = _outbox(rh, agent, Topics.DISPATCH_REQUESTED)
    assert wake.message is not None
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [wake.message]))
    assert len(rh.fake.received) == before, "no model call"
    assert (row.status, row.final_text) == ("completed", None), "nothing for the customer"
    assert "Not sent (a command through the API): There is no autonomous work to stop." in (row.summary or "")
    phone = await rh.run(run_request(agent, [command(rh.db, agent, "/goal stop")]))
    assert phone.final_text == "There is no autonomous work to stop."


# ---------------------------------------------------------------------------------------------- /skill


def _grant_skill(rh: RunnerHarness, agent: Agent, name: str, body: str) -> None:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(update(AiAgentVersion).where(AiAgentVersion.id == agent.version_id).values(skills=[name]))
        session.add(AgentSkill(org_id=agent.org_id, name=name, body=body))


async def test_skill_body_is_the_directive_and_an_unknown_skill_gets_a_clear_reply(rh: RunnerHarness) -> None:
    for body in ("/skill:pricing how much is the sofa?", "/pricing how much is the sofa?"):  # namespaced, legacy
        agent = create_agent(rh.db)
        _grant_skill(rh, agent, "pricing", "Always quote the list price: the blue sofa is 450 EUR.")
        rh.fake.script([Reply(text="450 EUR")])
        before = len(rh.fake.received)
        row = await rh.run(run_request(agent, [command(rh.db, agent, body)]))
        assert row.final_text == "450 EUR"
        assert _layers(row)["Directive"] == "Skill pricing:\nAlways quote the list price: the blue sofa is 450 EUR."
        sent = _user_texts(rh.fake.received[before])
        assert "how much is the sofa?" in sent and "pricing how much" not in sent

    before = len(rh.fake.received)
    unknown = await rh.run(run_request(agent, [command(rh.db, agent, "/skill:shipping where is it?")]))
    assert len(rh.fake.received) == before  # no model call
    assert unknown.final_text and "Unknown skill 'shipping'" in unknown.final_text
    assert "/skill:pricing" in unknown.final_text and unknown.would_send_to is not None
