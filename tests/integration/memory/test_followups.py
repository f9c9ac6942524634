"""Scheduled follow-ups fire at their time as ``followUp`` wakes, exactly once (issue 6 item 3), even with
two scheduler instances polling the same database; the woken run records the reason and links itself."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.followups.scheduler import CHANNEL_SESSION_ARCHIVED, NOT_DISPATCHABLE, FollowupScheduler
from switchboard.contracts import Serde, WakeReason
from switchboard.db.models import ChannelSession, Conversation, ScheduledFollowup
from switchboard.db.models.memory import MemoryFact
from switchboard.db.session import create_async_engine, create_async_sessionmaker, tenant_transaction
from tests.integration.memory.conftest import dispatches, run_for
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent
from tests.support.fake_llm import Reply

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def schedule(rh: RunnerHarness, agent: Agent, due_at: datetime, reason: str = "call back about the quote") -> uuid.UUID:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        row = ScheduledFollowup(
            org_id=agent.org_id,
            conversation_id=agent.conversation_id,
            contact_id=agent.contact_id,
            agent_id=agent.agent_id,
            due_at=due_at,
            reason=reason,
        )
        session.add(row)
        session.flush()
        return row.id


def followup(rh: RunnerHarness, agent: Agent, followup_id: uuid.UUID) -> ScheduledFollowup:
    with Session(rh.db, expire_on_commit=False) as session, tenant_transaction(session, agent.org_id):
        return session.get_one(ScheduledFollowup, followup_id)


async def test_a_followup_fires_once_at_its_time_with_two_schedulers(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic")
    due_at = datetime.now(UTC) + timedelta(seconds=1.5)
    soon = schedule(rh, agent, due_at)
    later = schedule(rh, agent, datetime.now(UTC) + timedelta(hours=1), reason="later")
    engine = create_async_engine(rh.database_url, pool_size=4)
    serde = Serde.from_settings(rh.kafka)
    first, second = (
        FollowupScheduler(create_async_sessionmaker(engine), serde, poll_s=0.05),
        FollowupScheduler(create_async_sessionmaker(engine), serde, poll_s=0.05),
    )
    try:
        first.start()
        second.start()
        deadline = time.monotonic() + 15
        while followup(rh, agent, soon).status == "scheduled":
            assert time.monotonic() < deadline, "the follow-up never fired"
            await asyncio.sleep(0.05)
        await first.stop()
        await second.stop()
        fired = followup(rh, agent, soon)
        assert fired.status == "fired" and fired.fired_at is not None and fired.fired_at >= due_at
        # Both instances once more, at the same instant: nothing left to fire.
        again = await asyncio.gather(first.tick(), second.tick())
        assert [f for batch in again for f in batch if f.org_id == agent.org_id] == []
    finally:
        await engine.dispose()
    [(_, dispatch)] = dispatches(rh, agent.conversation_id)
    assert dispatch.wake_reason is WakeReason.FOLLOW_UP and dispatch.message is None
    assert dispatch.wake_context.follow_up_id == soon and dispatch.target_agent_id == agent.agent_id
    assert followup(rh, agent, later).status == "scheduled"

    # The dispatcher's hop (tested on its own), then the run: reason recorded, shown, follow-up linked.
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.add(
            MemoryFact(
                org_id=agent.org_id,
                scope="contact",
                contact_id=agent.contact_id,
                fact="Wants the quote by e-mail",
                fact_key="quote",
                source="api",
            )
        )
    rh.fake.script([Reply(text="Hi again! About your quote...")])
    request = run_for(dispatch, agent.agent_id, agent.version_id)
    run = await rh.run(request)
    assert run.status == "completed" and run.wake_reason == "followUp"
    assert run.wake_context == {"follow_up_id": str(soon)}
    assert run.prompt is not None
    labels = [layer["label"] for layer in run.prompt["layers"]]
    assert labels[labels.index("Wake context") + 1] == "Follow-up"
    layers = {layer["label"]: layer["text"] for layer in run.prompt["layers"]}
    assert layers["Wake context"] == f"Wake reason: followUp. Context ids: follow_up_id={soon}."
    assert layers["Follow-up"].endswith("Reason: call back about the quote")
    # No customer text to search with: the contact's most recent facts.
    assert layers["Long-term memory"].endswith("- (this customer) Wants the quote by e-mail")
    deadline = time.monotonic() + 10
    while followup(rh, agent, soon).fired_run_id != request.run_id:
        assert time.monotonic() < deadline, "the follow-up was not linked to its run"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("why", "error"), [("handed to humans", NOT_DISPATCHABLE), ("number archived", CHANNEL_SESSION_ARCHIVED)]
)
async def test_a_followup_nobody_can_answer_fails_without_a_wake(rh: RunnerHarness, why: str, error: str) -> None:
    agent = create_agent(rh.db)
    target = schedule(rh, agent, datetime.now(UTC) - timedelta(seconds=1))
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        if why == "handed to humans":
            session.get_one(Conversation, agent.conversation_id).status = "handoff"
        else:  # a wake would answer through a number given up (docs/api.md ":archive")
            session.get_one(ChannelSession, agent.channel_session_id).archived_at = datetime.now(UTC)
    engine = create_async_engine(rh.database_url, pool_size=2)
    try:
        # (Asserted on the row: an API started by another test may run a scheduler on this database
        # too; when it holds the row, this tick skips it and that scheduler's commit is waited for.)
        await FollowupScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka)).tick()
    finally:
        await engine.dispose()
    deadline = time.monotonic() + 10
    while (row := followup(rh, agent, target)).status == "scheduled" and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert (row.status, row.error) == ("failed", error)
    assert dispatches(rh, agent.conversation_id) == []
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.scalar(select(ScheduledFollowup.fired_at).where(ScheduledFollowup.id == target)) is None


async def test_a_row_another_instance_holds_is_skipped_not_waited_for(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    target = schedule(rh, agent, datetime.now(UTC) - timedelta(seconds=1))
    engine = create_async_engine(rh.database_url, pool_size=2)
    scheduler = FollowupScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka))
    try:
        # Another instance in the middle of its claim transaction holds the row.
        with Session(rh.db) as holder, tenant_transaction(holder, agent.org_id):
            holder.scalars(select(ScheduledFollowup).where(ScheduledFollowup.id == target).with_for_update()).one()
            skipped = await asyncio.wait_for(scheduler.tick(), 5)
            assert target not in {f.followup_id for f in skipped}
        await scheduler.tick()
    finally:
        await engine.dispose()
    assert followup(rh, agent, target).status == "fired"
    assert len(dispatches(rh, agent.conversation_id)) == 1


async def test_the_api_process_runs_the_scheduler(rh: RunnerHarness, api: httpx.AsyncClient) -> None:
    """With the API app up (``API_FOLLOWUP_SCHEDULER`` on by default), a due follow-up fires by itself."""
    assert (await api.get("/healthz")).status_code == 200
    agent = create_agent(rh.db)
    target = schedule(rh, agent, datetime.now(UTC))
    deadline = time.monotonic() + 10
    while followup(rh, agent, target).status == "scheduled":
        assert time.monotonic() < deadline, "the API's scheduler did not fire the follow-up"
        await asyncio.sleep(0.1)
    [(_, dispatch)] = dispatches(rh, agent.conversation_id)
    assert dispatch.wake_context.follow_up_id == target


async def test_the_recovery_of_a_followups_run_still_knows_the_followup(rh: RunnerHarness) -> None:
    """The runner running a follow-up's wake died (a crash, a rollout): the dispatcher's recovery
    attempt is a ``recovery`` wake that keeps the follow-up's id. It must still see what was
    promised, and be the run the follow-up links to — it answered blind, and the follow-up never
    named its run."""
    agent = create_agent(rh.db, provider="anthropic")
    promised = schedule(rh, agent, datetime.now(UTC) - timedelta(seconds=1), reason="send the revised quote")
    engine = create_async_engine(rh.database_url, pool_size=2)
    try:
        await FollowupScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka)).tick()
    finally:
        await engine.dispose()
    [(_, dispatch)] = dispatches(rh, agent.conversation_id)
    lost = run_for(dispatch, agent.agent_id, agent.version_id)  # never reached a runner
    recovery = lost.model_copy(
        update={
            "run_id": uuid.uuid4(),
            "attempt": 2,
            "parent_run_id": lost.run_id,
            "wake_reason": WakeReason.RECOVERY,
            "wake_context": lost.wake_context.model_copy(update={"run_id": lost.run_id}),
        }
    )
    rh.fake.script([Reply(text="Here is the revised quote.")])
    run = await rh.run(recovery)
    assert run.status == "completed" and run.wake_reason == "recovery"
    assert run.prompt is not None
    layers = {layer["label"]: layer["text"] for layer in run.prompt["layers"]}
    assert layers["Follow-up"].endswith("Reason: send the revised quote")
    deadline = time.monotonic() + 10
    while followup(rh, agent, promised).fired_run_id != recovery.run_id:
        assert time.monotonic() < deadline, "the follow-up was not linked to the run that kept it"
        await asyncio.sleep(0.05)


async def test_a_due_followup_of_a_conversation_locked_elsewhere_waits_for_a_later_pass(rh: RunnerHarness) -> None:
    """Every writer of a conversation locks it first and its follow-ups after (an erasure cancels
    them); the scheduler holds the follow-up and then wanted the conversation — waiting, the two
    deadlocked and PostgreSQL failed the erasure. The scheduler now takes a busy conversation's
    follow-up at a later pass instead of waiting."""
    agent = create_agent(rh.db, provider="anthropic")
    due = schedule(rh, agent, datetime.now(UTC) - timedelta(seconds=1))
    engine = create_async_engine(rh.database_url, pool_size=2)
    scheduler = FollowupScheduler(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka))
    holder = Session(rh.db)
    try:
        with tenant_transaction(holder, agent.org_id):
            holder.execute(select(Conversation).where(Conversation.id == agent.conversation_id).with_for_update())
            fired = await asyncio.wait_for(scheduler.tick(), timeout=5)  # waited for the lock before
            assert [f for f in fired if f.org_id == agent.org_id] == []
            assert followup(rh, agent, due).status == "scheduled"
        fired = await scheduler.tick()  # the lock is gone: fired now
        assert [f.followup_id for f in fired if f.org_id == agent.org_id] == [due]
        assert followup(rh, agent, due).status == "fired"
    finally:
        holder.close()
        await engine.dispose()
