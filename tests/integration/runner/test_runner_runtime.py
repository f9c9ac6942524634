"""The runtime around the loop: secrets, concurrency, back-pressure, shutdown, recovery, redelivery."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from services.runner.store import RunStore
from services.runner.sweep import StaleRunSweeper
from switchboard.contracts import RunCompleted, Serde, Topics
from switchboard.contracts.enums import ErrorFamily
from switchboard.db.models import AiAgentRun, Contact, Conversation
from switchboard.db.session import create_async_engine, create_async_sessionmaker, tenant_transaction
from switchboard.observability.logging import JsonFormatter
from switchboard.run_outcomes import left_unanswered
from switchboard.settings import KafkaSettings
from switchboard.tool_catalog import SEARCH_CONTACTS
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, harness, inbound, run_request
from tests.support.api import create_org
from tests.support.fake_llm import Received, Reply, tool
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


async def test_planted_canary_key_appears_in_no_log_event_record_trace_or_api_response(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints, caplog: pytest.LogCaptureFixture
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    caplog.set_level(logging.DEBUG)
    org = create_org(stack.database_url)
    agent = create_agent(
        rh.db, org_id=org.org_id, provider="openai", model="gpt-5-mini", api_key=canary, tool_ids=[SEARCH_CONTACTS]
    )
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}),
            Reply(text="Pronto."),
            # The provider echoes the key in its error, as OpenAI does ("Incorrect API key provided: ...").
            Reply(status=401, error_body={"error": {"message": f"Incorrect API key provided: {canary}"}}),
        ]
    )
    ok = run_request(agent, [inbound(rh.db, agent, "Procure a Ana")])
    row_ok = await rh.run(ok)
    bad = run_request(agent, [inbound(rh.db, agent, "Oi de novo")])
    row_bad = await rh.run(bad)
    assert row_ok.status == "completed" and row_bad.status == "failed"
    # The key really was used.
    assert any(canary in json.dumps(r.headers) for r in rh.fake.calls_to("openai"))

    formatter = JsonFormatter("runner")
    lines = [formatter.format(record) for record in caplog.records]
    assert lines and not [line for line in lines if canary in line]
    assert not [r for r in caplog.records if canary in repr(vars(r))]

    for request, row in ((ok, row_ok), (bad, row_bad)):
        events = await rh.topic_records(Topics.RUN_EVENTS, run_id=request.run_id, min_count=2)
        assert events and not [raw for raw, _ in events if canary.encode() in raw]
        text_columns = json.dumps([row.tool_calls, row.error_message, row.summary, row.final_text], default=str)
        assert canary not in text_columns
    heartbeats = await rh.topic_records(Topics.RUN_HEARTBEATS, timeout_s=1.0, min_count=0)
    assert not [raw for raw, _ in heartbeats if canary.encode() in raw]
    outbox = rh.outbox_raw(agent.conversation_id)
    assert len(outbox) == 4 and not [p for p in outbox if canary.encode() in p]

    # What the API shows of these runs: the list, each run with its trace, each run's live events.
    listed = await api.get(
        "/api/v1/runs", params={"conversation_id": str(agent.conversation_id)}, headers=org.headers()
    )
    assert listed.status_code == 200 and {r["id"] for r in listed.json()["data"]} == {str(ok.run_id), str(bad.run_id)}
    bodies = [listed.text]
    for request in (ok, bad):
        one = await api.get(f"/api/v1/runs/{request.run_id}", headers=org.headers())
        assert one.status_code == 200 and one.json()["data"]["trace"]
        stream = await api.get(f"/api/v1/runs/{request.run_id}/events", headers=org.headers())
        assert stream.status_code == 200 and "event: done" in stream.text
        assert ("event: usage" if request is ok else "event: error") in stream.text
        bodies += [one.text, stream.text]
    failed = json.loads(bodies[3])["data"]
    assert failed["error_code"] == "provider_auth_invalid" and failed["error_message"]
    assert not [body for body in bodies if canary in body]


async def test_the_same_run_delivered_twice_runs_once(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="uma vez", delay_s=0.3)])
    request = run_request(agent, [inbound(rh.db, agent, "Oi")])
    before = len(rh.fake.calls_to("anthropic"))
    await rh.submit(request)
    await rh.submit(request)
    await rh.wait_run(request)
    await rh.submit(request)  # after it finished, too
    await asyncio.sleep(1.0)
    assert len(rh.fake.calls_to("anthropic")) - before == 1
    completed = [r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
    assert len(completed) == 1


async def test_recovery_attempt_closes_the_lost_parent_and_completes(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    message = inbound(rh.db, agent, "Oi")
    parent = run_request(agent, [message])
    # A runner that died mid-run: its row stays 'running' and nothing else happens.
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.add(
            AiAgentRun(
                id=parent.run_id,
                org_id=agent.org_id,
                agent_id=agent.agent_id,
                agent_version_id=agent.version_id,
                conversation_id=agent.conversation_id,
                status="running",
                # What its steps had spent when it died: the provider charged that.
                tokens_in=700,
                tokens_out=70,
                cost_micros=1234,
            )
        )
    rh.fake.script([Reply(text="resposta da tentativa 2")])
    retry = run_request(agent, [message], attempt=2, parent_run_id=parent.run_id)
    row = await rh.run(retry)
    assert row.status == "completed" and row.attempt == 2 and row.parent_run_id == parent.run_id
    lost = rh.run_row(parent)
    assert lost is not None
    assert (lost.status, lost.vitality, lost.error_family) == ("failed", "dead", "processLost")
    # The lost run's usage reaches the ledger when it is closed (its runner never will count it).
    usage = rh.usage(agent.org_id)
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (700 + row.tokens_in, 70 + row.tokens_out)
    assert usage.cost_micros == 1234 + row.cost_micros


async def test_a_newer_attempt_supersedes_its_parent_running_here_and_only_it_replies(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="tarde demais", delay_s=4.0), Reply(text="resposta da tentativa 2")])
    message = inbound(rh.db, agent, "Oi")
    parent = run_request(agent, [message])
    await rh.submit(parent)
    deadline = time.monotonic() + 20
    while (row := rh.run_row(parent)) is None or row.status != "running":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    # The dispatcher's lease lapsed meanwhile (partitions moved): it re-dispatched the run.
    retry = run_request(agent, [message], attempt=2, parent_run_id=parent.run_id)
    assert (await rh.run(retry)).status == "completed"
    lost = rh.run_row(parent)
    assert lost is not None and (lost.status, lost.error_family) == ("failed", "processLost")
    await asyncio.sleep(4.5)  # past the parent's model call: it must not complete nor announce anything
    lost = rh.run_row(parent)
    assert lost is not None and lost.status == "failed" and lost.final_text is None
    completed = [r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
    assert [(r.run_id, r.final_text) for r in completed] == [(retry.run_id, "resposta da tentativa 2")]


async def test_a_superseded_run_that_finishes_late_is_counted_once(rh: RunnerHarness) -> None:
    """Closing the superseded parent counts the step it had recorded; when its runner then stops
    it (hands it back), only what that closing did not count is added: every model call the
    attempts reported is in the ledger exactly once (the parent's cancelled call reported nothing)."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=300, output_tokens=30),
            Reply(text="tarde demais", delay_s=4.0, input_tokens=500, output_tokens=50),
            Reply(text="resposta da tentativa 2", input_tokens=100, output_tokens=10),
        ]
    )
    message = inbound(rh.db, agent, "Oi")
    parent = run_request(agent, [message])
    await rh.submit(parent)
    deadline = time.monotonic() + 20
    while (row := rh.run_row(parent)) is None or row.tokens_in != 300:  # its first step is recorded
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    retry = run_request(agent, [message], attempt=2, parent_run_id=parent.run_id)
    assert (await rh.run(retry)).status == "completed"
    deadline = time.monotonic() + 20
    # Closed either way round: lost by the retry's claim, then handed back by its runner, or
    # handed back first (the runner saw the newer attempt) and found closed by the claim.
    while (lost := rh.run_row(parent)) is None or lost.status != "failed":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # anything counted twice would show up now
    usage = rh.usage(agent.org_id)
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (300 + 100, 30 + 10)


def _lose_the_answer_of_the_first_finish(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The first terminal transaction commits, then its connection drops before the answer:
    the runner sees a lost connection and retries. Returns what each finish answered."""
    real_finish = RunStore.finish
    calls: list[bool] = []

    async def finish_then_lose_the_answer(self: RunStore, subject: Any, finish: Any) -> bool:
        announced = await real_finish(self, subject, finish)
        calls.append(announced)
        if len(calls) == 1:
            raise OperationalError("COMMIT", None, ConnectionError("server closed the connection unexpectedly"))
        return announced

    monkeypatch.setattr(RunStore, "finish", finish_then_lose_the_answer)
    return calls


async def test_a_run_requested_before_its_contact_was_erased_is_not_run(rh: RunnerHarness) -> None:
    """The erasure (POST /api/v1/contacts/{id}:erase) commits while a run of the contact waits in
    the pipeline: claimed after, the run ends at once — no model call, no trace, nothing to send —
    and nobody is told a customer waits."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="nunca deve ser escrito")])
    request = run_request(agent, [inbound(rh.db, agent, "Oi, sou a Ana")])
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.get_one(Contact, agent.contact_id).erased_at = datetime.now(UTC)
    calls_before = len(rh.fake.calls_to("anthropic"))
    row = await rh.run(request)
    assert (row.status, row.abort_reason) == ("aborted", "contact_erased")
    assert row.final_text is None and row.tool_calls == [] and row.prompt is None
    assert len(rh.fake.calls_to("anthropic")) == calls_before, "no model call"
    [completed] = [r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
    assert completed.would_send_to is None and not left_unanswered(completed)


async def test_a_trace_append_retried_after_its_commit_landed_writes_each_entry_once(
    rh: RunnerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append after the first step committed, then its connection dropped before the answer:
    the runner retries it (a lost connection is transient). Before, the retry appended the step's
    entries a second time, and the run's trace showed the tool called twice."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([tool(SEARCH_CONTACTS, {"query": "Ana"}), Reply(text="Encontrei a Ana.")])
    real_append = RunStore.append_trace
    appends: list[int] = []

    async def append_then_lose_the_answer(self: RunStore, *args: Any, **kwargs: Any) -> None:
        await real_append(self, *args, **kwargs)
        appends.append(len(args[1]))
        if len(appends) == 1:
            raise OperationalError("COMMIT", None, ConnectionError("server closed the connection unexpectedly"))

    monkeypatch.setattr(RunStore, "append_trace", append_then_lose_the_answer)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi, procura a Ana")]))
    assert row.status == "completed"
    assert len(appends) >= 2 and appends[0] == appends[1] > 0, "the first append was retried"
    tool_entries = [e for e in row.tool_calls if e.get("kind") == "tool"]
    assert len(tool_entries) == 1, f"the tool call is in the trace once: {tool_entries}"
    model_steps = [e.get("step") for e in row.tool_calls if e.get("kind") == "model"]
    assert len(model_steps) == len(set(model_steps)) == 2, f"each model step once: {model_steps}"


async def test_a_run_that_crashes_between_steps_keeps_what_it_spent_and_its_trace(
    rh: RunnerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of ours (here: writing the trace after the first step raises) fails the run — and the
    failed row, the usage ledger and the trace still hold the step the provider billed. Before, the
    closing wrote zeros over the row's usage, counted nothing, and the step's trace was lost."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=300, output_tokens=30),
            Reply(text="nunca chega", input_tokens=400, output_tokens=40),
        ]
    )

    async def broken_append(self: RunStore, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in the trace writer")

    monkeypatch.setattr(RunStore, "append_trace", broken_append)
    request = run_request(agent, [inbound(rh.db, agent, "Oi, procura a Ana")])
    row = await rh.run(request)
    assert (row.status, row.error_code) == ("failed", "runner_error")
    assert (row.tokens_in, row.tokens_out) == (300, 30) and row.cost_micros > 0
    usage = rh.usage(agent.org_id)
    assert usage is not None and (usage.input_tokens, usage.output_tokens, usage.cost_micros) == (
        300,
        30,
        row.cost_micros,
    )
    kinds = [entry.get("kind") for entry in row.tool_calls]
    assert "model" in kinds and "tool" in kinds, f"the billed step is in the trace: {kinds}"
    [completed] = [r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
    assert (completed.tokens_in, completed.cost_micro_usd) == (300, row.cost_micros)


async def test_a_finish_retried_after_its_commit_landed_counts_and_announces_once(
    rh: RunnerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminal transaction committed, then the connection dropped before its answer came
    back: the runner retries it (a lost connection is transient). The retry finds the row closed
    by that same finish and does nothing — before, it counted the run's usage a second time."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=300, output_tokens=30),
            Reply(text="Encontrei a Ana.", input_tokens=400, output_tokens=40),
        ]
    )
    calls = _lose_the_answer_of_the_first_finish(monkeypatch)
    request = run_request(agent, [inbound(rh.db, agent, "Oi, procura a Ana")])
    row = await rh.run(request)
    deadline = time.monotonic() + 20
    while len(calls) < 2:
        assert time.monotonic() < deadline, "the finish was not retried"
        await asyncio.sleep(0.05)

    assert calls == [True, True], "the retry knows its own commit announced the run"
    usage = rh.usage(agent.org_id)
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (700, 70)
    completed = [r for t, r in rh.outbox(agent.conversation_id) if t == Topics.RUN_COMPLETED.name]
    assert [r.run_id for r in completed] == [request.run_id]
    again = rh.run_row(request)
    assert again is not None and again.tool_calls == row.tool_calls, "no trace entry written twice"


async def test_a_late_finish_retried_after_its_commit_landed_counts_its_remainder_once(
    rh: RunnerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep closed a run as lost (counting its first step) while its runner was in fact still
    calling the model; the runner then finishes late, counts the rest, and loses the answer of
    that COMMIT. The retry sees its own late finish on the row (0030) and adds nothing — before,
    the remainder went into the ledger twice and the trace tail onto the row twice."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=300, output_tokens=30),
            Reply(text="tarde demais", delay_s=2.0, input_tokens=500, output_tokens=50),
        ]
    )
    calls = _lose_the_answer_of_the_first_finish(monkeypatch)
    request = run_request(agent, [inbound(rh.db, agent, "Oi, procura a Ana")])
    await rh.submit(request)
    deadline = time.monotonic() + 20
    while (row := rh.run_row(request)) is None or row.tokens_in != 300:  # its first step is recorded
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    engine = create_async_engine(rh.db.url.render_as_string(hide_password=False), pool_size=1)
    try:
        sweep = RunStore(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka), runner_id="sweep-test")
        await sweep.close_stale(agent.org_id, request.run_id)
    finally:
        await engine.dispose()
    while len(calls) < 2:
        assert time.monotonic() < deadline, "the late finish was not retried"
        await asyncio.sleep(0.05)

    assert calls == [False, False], "a late finish announces nothing, retried or not"
    usage = rh.usage(agent.org_id)
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (800, 80)
    assert usage.run_count == 1, "one run, whoever closed it first"
    row = rh.run_row(request)
    assert row is not None and (row.status, row.error_code) == ("failed", "process_lost")
    entries = [json.dumps(entry, sort_keys=True) for entry in row.tool_calls]
    assert len(entries) == len(set(entries)), "no trace entry written twice"
    assert not [r for t, r in rh.outbox(agent.conversation_id) if t == Topics.RUN_COMPLETED.name]


async def test_a_recovery_of_a_run_that_answered_after_all_sends_no_second_reply(rh: RunnerHarness) -> None:
    """The lease expired while the finished run's run_completed was delayed (a broker or dispatcher
    outage): the re-dispatched attempt finds the messages answered and answers nothing (chaos finding 1)."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="a única resposta")])
    message = inbound(rh.db, agent, "Oi")
    first = run_request(agent, [message])
    assert (await rh.run(first)).final_text == "a única resposta"
    calls = len(rh.fake.received)

    retry = run_request(agent, [message], attempt=2, parent_run_id=first.run_id)
    row = await rh.run(retry)
    assert (row.status, row.abort_reason, row.final_text) == ("aborted", "already_answered", None)
    assert len(rh.fake.received) == calls  # no model call
    completed = [r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
    assert [(r.run_id, r.final_text, r.would_send_to is None) for r in completed] == [
        (first.run_id, "a única resposta", False),
        (retry.run_id, None, True),  # announced, so the dispatcher frees the conversation; nothing to send
    ]
    assert rh.run_row(first).status == "completed"  # type: ignore[union-attr]


async def test_a_run_claimed_after_a_person_took_the_conversation_over_is_not_run(rh: RunnerHarness) -> None:
    """The dispatcher does not know about a takeover through the API: a follow-up it requested
    for a message that was waiting reaches the runner after it. The claim reads the conversation
    under its lock, runs nothing (no model call, no tool, no reply) and says why, so the
    dispatcher hands the rest of the conversation to the people."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="não devia responder")])
    message = inbound(rh.db, agent, "Ainda aí?")
    rh.scalar(
        agent.org_id,
        "UPDATE conversations SET status = 'handoff', handoff_at = now() WHERE id = :c RETURNING id",
        c=agent.conversation_id,
    )
    calls = len(rh.fake.received)
    request = run_request(agent, [message])
    row = await rh.run(request)
    assert (row.status, row.abort_reason, row.final_text) == ("aborted", "conversation_with_humans", None)
    assert row.tokens_in == 0 and len(rh.fake.received) == calls, "no model call"
    [completed] = [r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
    assert (completed.run_id, completed.abort_reason, completed.would_send_to) == (
        request.run_id,
        "conversation_with_humans",
        None,
    )

    dry = run_request(agent, [message]).model_copy(update={"dry_run": True})
    assert (await rh.run(dry)).status == "completed", "a test run (dry) still runs: it sends nothing anyway"


async def test_a_recovery_whose_parent_never_got_a_row_records_it_as_lost(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="tentativa 3")])
    message = inbound(rh.db, agent, "Oi")
    never_claimed = run_request(agent, [message], attempt=2)
    retry = run_request(agent, [message], attempt=3, parent_run_id=never_claimed.run_id)
    row = await rh.run(retry)
    assert row.status == "completed" and row.parent_run_id == never_claimed.run_id
    parent = rh.run_row(never_claimed)
    assert parent is not None and (parent.status, parent.error_family, parent.attempt) == ("failed", "processLost", 2)
    await rh.submit(never_claimed)  # a late delivery of the lost attempt is skipped
    await asyncio.sleep(1.0)
    assert [r.run_id for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)] == [retry.run_id]


async def test_300_concurrent_runs_against_a_slow_model_all_complete(rh: RunnerHarness) -> None:
    agents = [create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5") for _ in range(30)]
    rh.fake.script(lambda _: Reply(text="ok", delay_s=1.0))
    requests = []
    for i in range(300):
        agent = agents[i % len(agents)]
        # One active run per conversation: give each run its own conversation of the agent's org.
        requests.append(run_request(_fresh_conversation(rh, agent), []))
    started = time.monotonic()
    await asyncio.gather(*(rh.submit(r) for r in requests))
    statuses = await rh.wait_runs(requests, timeout_s=90)
    elapsed = time.monotonic() - started
    assert list(statuses.values()).count("completed") == 300, statuses
    # Concurrency, not a queue: 300 one-second calls in far less than 300 seconds.
    assert elapsed < 60, elapsed


async def test_in_flight_cap_applies_back_pressure(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings
) -> None:
    # Its own topics (the ``topics`` fixture): the module's runner must not take these runs.
    async with harness(stack.database_url, topics, max_in_flight=2) as small:
        active = 0
        peak = 0
        lock = asyncio.Lock()

        def script(_: Received) -> Reply:
            return Reply(text="ok", delay_s=0.4)

        original = small.fake._answer

        async def tracked(provider: str, request: Any, model: str) -> Any:
            nonlocal active, peak
            async with lock:
                active += 1
                peak = max(peak, active)
            try:
                return await original(provider, request, model)
            finally:
                active -= 1

        small.fake.script(script)
        small.fake._answer = tracked  # type: ignore[method-assign]
        agent = create_agent(small.db, provider="anthropic", model="claude-haiku-4-5")
        requests = [run_request(_fresh_conversation(small, agent), []) for _ in range(8)]
        for r in requests:
            await small.submit(r)
        rows = [await small.wait_run(r, timeout_s=60) for r in requests]
        assert all(r.status == "completed" for r in rows)
        assert peak <= 2


async def test_shutdown_hands_back_runs_that_do_not_finish_in_time(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings
) -> None:
    async with harness(stack.database_url, topics, shutdown_grace_s=0.5) as h:
        agent = create_agent(h.db, provider="anthropic", model="claude-haiku-4-5")
        h.fake.script([Reply(text="too slow", delay_s=20)])
        request = run_request(agent, [inbound(h.db, agent, "Oi")])
        await h.submit(request)
        deadline = time.monotonic() + 20
        while (row := h.run_row(request)) is None or row.status != "running":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await h.stop_runner()
        row = h.run_row(request)
        assert row is not None
        assert (row.status, row.vitality, row.error_family, row.error_code) == (
            "failed",
            "dead",
            "processLost",
            "runner_shutdown",
        )
        # Announced, so the dispatcher recovers the messages at once (attempt + 1), not after
        # the lease; and the notifier does not call it an unanswered customer (docs/notifier.md).
        [handed] = [r for _, r in h.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
        assert (handed.run_id, handed.status.value, handed.vitality.value, handed.error_family) == (
            request.run_id,
            "failed",
            "dead",
            ErrorFamily.PROCESS_LOST,
        )
        assert handed.error_code == "runner_shutdown" and handed.would_send_to is None
        assert handed.message_ids == tuple(m.message_id for m in request.messages)
        await h.start_runner()


def _fresh_conversation(rh: RunnerHarness, agent: Agent) -> Agent:
    """A copy of ``agent`` with a new conversation (and contact) in the same org."""
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        contact = Contact(org_id=agent.org_id, external_id=f"{uuid.uuid4().hex[:12]}@c.us")
        session.add(contact)
        session.flush()
        conversation = Conversation(
            org_id=agent.org_id,
            channel_session_id=agent.channel_session_id,
            contact_id=contact.id,
            chat_id=contact.external_id,
        )
        session.add(conversation)
        session.flush()
        return dataclasses.replace(
            agent, conversation_id=conversation.id, contact_id=contact.id, chat_id=contact.external_id
        )


async def test_every_step_is_a_structured_log_line_without_the_conversation(
    rh: RunnerHarness, stack: StackEndpoints, caplog: pytest.LogCaptureFixture
) -> None:
    """[004 §8.3]: run, agent, version and org ids, the step, what happened, tokens and cost — and
    none of the words (the customer's message, the tool's arguments and result stay in the trace)."""
    caplog.set_level(logging.INFO, logger="services.runner")
    org = create_org(stack.database_url)
    agent = create_agent(rh.db, org_id=org.org_id, provider="openai", model="gpt-5-mini", tool_ids=[SEARCH_CONTACTS])
    secret_words = f"Ana-{uuid.uuid4().hex[:6]}"
    rh.fake.script([tool(SEARCH_CONTACTS, {"query": secret_words}), Reply(text="Pronto.", output_tokens=7)])
    request = run_request(agent, [inbound(rh.db, agent, f"Procure a {secret_words}")])
    assert (await rh.run(request)).status == "completed"

    steps = [
        r for r in caplog.records if r.getMessage() == "run step" and r.__dict__.get("run_id") == str(request.run_id)
    ]
    assert [(r.__dict__["step_index"], r.__dict__["event"]) for r in steps] == [
        (1, "model_called"),
        (1, "tool_called"),
        (2, "model_called"),
    ]
    tool_line = steps[1].__dict__
    assert tool_line["tool_name"] == SEARCH_CONTACTS and tool_line["is_error"] is False
    last = steps[2].__dict__
    assert last["tokens_out"] == 7 and last["cost_micros"] >= 0 and last["stop_reason"]
    assert {r.__dict__["organization_id"] for r in steps} == {str(org.org_id)}
    assert {r.__dict__["version_id"] for r in steps} == {str(agent.version_id)}
    formatter = JsonFormatter("runner")
    assert not [r for r in steps if secret_words in formatter.format(r)]


async def test_the_sweep_closes_runs_whose_runner_died_and_counts_their_usage(rh: RunnerHarness) -> None:
    """The last attempt of a run, and a dry run, whose runner died: no attempt comes to close
    them, so the runners' sweep does — as lost, usage counted — and leaves live runs alone."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    now = datetime.now(UTC)
    old = now - timedelta(minutes=20)
    rows = {
        "last_attempt": dict(status="running", heartbeat_at=old, tokens_in=500, tokens_out=50, cost_micros=900),
        "dry_run": dict(status="running", heartbeat_at=old, is_dry_run=True),
        "never_beat": dict(status="running", heartbeat_at=None, created_at=old),
        "alive": dict(status="running", heartbeat_at=now),
    }
    ids = {name: uuid.uuid4() for name in rows}
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        for name, values in rows.items():
            session.add(
                AiAgentRun(
                    id=ids[name],
                    org_id=agent.org_id,
                    agent_id=agent.agent_id,
                    agent_version_id=agent.version_id,
                    conversation_id=agent.conversation_id if name == "last_attempt" else None,
                    **values,
                )
            )
    engine = create_async_engine(rh.db.url.render_as_string(hide_password=False), pool_size=2)
    try:
        store = RunStore(create_async_sessionmaker(engine), Serde.from_settings(rh.kafka), runner_id="sweep-test")
        sweeper = StaleRunSweeper(store, interval_s=60, older_than_s=600)
        assert await sweeper.sweep_once() >= 3  # other tests' dead rows may be closed too
    finally:
        await engine.dispose()
    status = {
        name: rh.scalar(
            agent.org_id, "SELECT status || '/' || coalesce(error_code, '') FROM ai_agent_runs WHERE id = :r", r=i
        )
        for name, i in ids.items()
    }
    assert status == {
        "last_attempt": "failed/process_lost",
        "dry_run": "failed/process_lost",
        "never_beat": "failed/process_lost",
        "alive": "running/",
    }
    usage = rh.usage(agent.org_id)
    assert usage is not None and (usage.input_tokens, usage.output_tokens, usage.cost_micros) == (500, 50, 900)


async def test_a_run_whose_finish_fails_for_good_keeps_what_it_spent_on_its_row(
    rh: RunnerHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database went away for longer than the terminal transaction's retries (a failover): the
    run stays ``running`` until the dispatcher's recovery closes it as lost, counting what the row
    says it spent. A one-step run's usage and trace lived only in that finish, so the provider's
    bill was counted as nothing — while the recovery ran the turn and paid again."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="Olá!", input_tokens=300, output_tokens=30)])

    async def finish_never_lands(self: RunStore, subject: Any, finish: Any) -> bool:
        raise OperationalError("COMMIT", None, ConnectionError("server closed the connection unexpectedly"))

    monkeypatch.setattr(RunStore, "finish", finish_never_lands)
    request = run_request(agent, [inbound(rh.db, agent, "Oi")])
    await rh.submit(request)
    deadline = time.monotonic() + 20
    while (row := rh.run_row(request)) is None or not row.cost_micros:
        assert time.monotonic() < deadline, "the run's spend never reached its row"
        await asyncio.sleep(0.1)
    assert row.status == "running", "still the recovery's to close"
    assert (row.tokens_in, row.tokens_out, row.steps_count) == (300, 30, 1)
    assert [e.get("kind") for e in row.tool_calls] == ["model"], "and the billed step is in its trace"
