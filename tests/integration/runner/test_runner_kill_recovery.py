"""Issue 5 acceptance: SIGKILL the runner mid-run; the dispatcher recovers it and the customer gets one reply.

Everything is real except the model: a ``switchboard dispatcher`` process and two
successive ``switchboard runner`` processes on the test's topics, the MCP tool
server and the outbox relay (in the test's event loop), a scratch database of this
module (the relay's advisory lock is per database, so no other test's relay can
publish our outbox rows), and the fake model server, whose first call never answers
in time — the runner is killed while waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from services.api.mcp.server import McpToolServer
from switchboard.contracts import (
    DispatchRequested,
    RunCompleted,
    RunRequested,
    RunStatus,
    Topics,
    WakeContext,
    WakeReason,
)
from switchboard.db.models import AiAgentRun
from switchboard.db.session import normalize_url, tenant_transaction
from switchboard.kafka.outbox_relay import OutboxRelay, OutboxRelaySettings
from switchboard.kafka.producer import RecordProducer
from switchboard.run_tokens import RunTokenSettings
from switchboard.settings import DatabaseSettings, KafkaSettings
from switchboard.tool_catalog import SEARCH_CONTACTS
from tests.integration.db.conftest import MigratedDatabase, PgServer, scratch_database
from tests.integration.dispatcher.harness import Observer, WorkerProcess, agent_snapshot, publish_record
from tests.integration.runner.harness import Agent, RunnerProcess, create_agent, inbound
from tests.support.fake_llm import FakeLLM, Received, Reply, ServedApp, tool
from tests.support.stack import StackEndpoints

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

# Longer than the runner group's failure detection (aiokafka's 10 s session timeout): a re-dispatch
# whose lease ran out before the new runner got the partition would be re-dispatched once more.
LEASE_S = 15
# Far beyond how long the graceful case waits for the recovered reply (RECOVERED_WITHIN_S).
GRACEFUL_LEASE_S = 600
RECOVERED_WITHIN_S = 60
FINAL = "Temos sim, a Ana Souza pode te atender."


@pytest.fixture(scope="module")
def kill_db(stack: StackEndpoints) -> Iterator[MigratedDatabase]:
    server = PgServer(owner_url=normalize_url(stack.database_owner_url), app_url=normalize_url(stack.database_url))
    with scratch_database(server) as database:
        assert isinstance(database, MigratedDatabase)
        yield database


@contextlib.asynccontextmanager
async def in_loop_services(kafka: KafkaSettings, database_url: str, fake: FakeLLM) -> AsyncIterator[ServedApp]:
    """The fake model, the MCP tool server and the outbox relay, served from the test's event loop."""
    database = DatabaseSettings(url=database_url)
    await fake.start()
    tools = McpToolServer(database=database, secret=RunTokenSettings().secret())
    mcp = await ServedApp(tools.app).start()
    relay = OutboxRelay(
        OutboxRelaySettings(kafka=kafka, database=database, idle_poll_max_s=0.05, lock_retry_s=0.2),
        service="test-relay",
    )
    relay.start()
    try:
        yield mcp
    finally:
        await relay.stop()
        await mcp.stop()
        await tools.dispose()
        if fake._server is not None:  # the killed runner's call is still "thinking": do not wait for it
            fake._server.force_exit = True
        await fake.stop()


def first_call_hangs() -> Callable[[Received], Reply]:
    """Call 1 (attempt 1) outlives the runner; then a tool call and the answer (attempt 2)."""
    replies = [
        Reply(text="(never delivered)", delay_s=60),
        tool(SEARCH_CONTACTS, {"query": "Ana"}),
        Reply(text=FINAL),
    ]

    def script(_: Received) -> Reply:
        return replies.pop(0) if len(replies) > 1 else replies[0]

    return script


def runs_of(engine: Engine, agent: Agent) -> list[AiAgentRun]:
    with Session(engine, expire_on_commit=False) as session, tenant_transaction(session, agent.org_id):
        return list(
            session.scalars(
                select(AiAgentRun)
                .where(AiAgentRun.conversation_id == agent.conversation_id)
                .order_by(AiAgentRun.attempt)
            )
        )


async def until(condition: Callable[[], object], *, timeout_s: float, what: str, logs: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{logs()[-4000:]}")
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("stop", ["sigkill", "sigterm"])
async def test_a_runner_stopped_mid_run_is_recovered_and_the_conversation_gets_one_reply(
    topics: KafkaSettings, kill_db: MigratedDatabase, tmp_path: Path, stop: str
) -> None:
    """SIGKILL: nothing is announced, the dispatcher's lease runs out and it re-dispatches. SIGTERM
    (a rolling deploy): the runner hands the run back and announces it, and the dispatcher
    recovers at once — the lease is set far longer than the test waits, so only the
    announcement can explain the recovery."""
    graceful = stop == "sigterm"
    lease_s = GRACEFUL_LEASE_S if graceful else LEASE_S
    database_url = kill_db.app_url.render_as_string(hide_password=False)
    engine = kill_db.app_engine
    agent = create_agent(engine, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    message = inbound(engine, agent, "Oi, vocês têm o produto X?")
    fake = FakeLLM(first_call_hangs())
    async with (
        in_loop_services(topics, database_url, fake) as mcp,
        RecordProducer(topics, service="test", linger_ms=1) as producer,
        Observer(topics) as observer,
    ):
        snapshot = agent_snapshot(agent.org_id, agent.channel_session_id).model_copy(
            update={
                "agent_id": agent.agent_id,
                "version_id": agent.version_id,
                "provider": "anthropic",
                "model": "claude-haiku-4-5",
                "tool_ids": (SEARCH_CONTACTS,),
            }
        )
        await producer.send(Topics.PUBLISHED, publish_record(agent.org_id, snapshot))
        runner_env = {
            "RUNNER_GROUP_ID": f"runner-{uuid.uuid4().hex[:8]}",
            "RUNNER_MCP_URL": f"{mcp.url}/mcp",
            "RUNNER_HEARTBEAT_S": "1",
            "RUNNER_STALE_RUN_AFTER_S": "5",
            "RUNNER_MODEL_CALL_TIMEOUT_S": "120",
            "PROVIDERS_ANTHROPIC_BASE_URL": fake.url,
            "RUNNER_SHUTDOWN_GRACE_S": "0.5",
        }
        dispatcher = WorkerProcess(topics, database_url, tmp_path, DISPATCHER_LEASE_S=str(lease_s)).start()
        first = RunnerProcess(topics, database_url, tmp_path, **runner_env).start()
        second: RunnerProcess | None = None
        try:
            await asyncio.gather(dispatcher.wait_ready(), first.wait_ready())
            await producer.send(
                Topics.DISPATCH_REQUESTED,
                DispatchRequested(
                    org_id=agent.org_id,
                    conversation_id=agent.conversation_id,
                    contact_id=agent.contact_id,
                    channel_session_id=agent.channel_session_id,
                    wake_reason=WakeReason.USER_MESSAGE,
                    wake_context=WakeContext(message_id=message.message_id),
                    message=message,
                ),
            )

            # Attempt 1 is running and waiting for its (slow) model call: kill the runner there.
            def attempt_one_waits_for_the_model() -> bool:
                rows = runs_of(engine, agent)
                return bool(rows) and rows[0].status == "running" and len(fake.calls_to("anthropic")) == 1

            await until(attempt_one_waits_for_the_model, timeout_s=40, what="attempt 1 running", logs=first.logs)
            if graceful:
                assert first.stop() == 0
            else:
                first.kill()
            second = RunnerProcess(topics, database_url, tmp_path, **runner_env).start()
            await second.wait_ready()

            def replied() -> list[RunCompleted]:
                return [
                    r
                    for r in observer.records(Topics.RUN_COMPLETED)
                    if r.conversation_id == agent.conversation_id and r.status is RunStatus.COMPLETED
                ]

            await until(lambda: replied(), timeout_s=RECOVERED_WITHIN_S, what="a completed run", logs=second.logs)
            # A duplicate (a second reply, a third attempt racing the second) would show up by now.
            await asyncio.sleep(3)
        finally:
            for process in (first, second, dispatcher):
                if process is not None:
                    process.stop()

    requests: list[RunRequested] = [r for r in observer.run_requests if r.conversation_id == agent.conversation_id]
    assert [r.attempt for r in requests] == [1, 2], requests
    lost, recovered = requests
    assert recovered.parent_run_id == lost.run_id and recovered.wake_reason is WakeReason.RECOVERY
    assert [m.message_id for m in recovered.messages] == [message.message_id]

    rows = {row.id: row for row in runs_of(engine, agent)}
    assert (rows[lost.run_id].status, rows[lost.run_id].vitality, rows[lost.run_id].error_family) == (
        "failed",
        "dead",
        "processLost",
    )
    done = rows[recovered.run_id]
    assert (done.status, done.attempt, done.parent_run_id, done.final_text) == ("completed", 2, lost.run_id, FINAL)
    # Attempt 2 really used the tool server: the tool step has a result, no error.
    tool_steps = [e for e in done.tool_calls if e.get("kind") == "tool"]
    assert [(e["tool_name"], e["is_error"]) for e in tool_steps] == [(SEARCH_CONTACTS, False)]
    assert [c["contact_id"] for c in json.loads(tool_steps[0]["result"])["contacts"]] == [str(agent.contact_id)]

    # One reply: one completed run_completed for the conversation, with the text, for the message;
    # before it, for a graceful stop, the hand-back's own (failed, sent nowhere).
    completions = [r for r in observer.records(Topics.RUN_COMPLETED) if r.conversation_id == agent.conversation_id]
    if graceful:
        handed_back = completions.pop(0)
        assert (handed_back.run_id, handed_back.status, handed_back.error_code) == (
            lost.run_id,
            RunStatus.FAILED,
            "runner_shutdown",
        )
        assert handed_back.would_send_to is None
        assert rows[lost.run_id].error_code == "runner_shutdown"
    assert len(completions) == 1, completions
    (reply,) = completions
    assert reply.run_id == recovered.run_id and reply.status is RunStatus.COMPLETED and reply.final_text == FINAL
    assert message.message_id in reply.message_ids
    assert reply.would_send_to is not None and reply.would_send_to.chat_id == agent.chat_id
