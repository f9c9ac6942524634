"""Each provider, through its official SDK against a local server speaking its API:
tool call → tool executed by the real MCP server → result → final answer, usage and cost summed."""

from __future__ import annotations

import json

import pytest

from switchboard.contracts import HandoffTriggered, RunCompleted, RunStarted
from switchboard.db.usage import UsageTotals
from switchboard.tool_catalog import SEARCH_CONTACTS
from tests.integration.runner.harness import RunnerHarness, create_agent, inbound, run_request
from tests.support.fake_llm import Received, Reply, tool

pytestmark = pytest.mark.integration

# (provider, model, input, output, cache read: micro-USD per million) as in switchboard/catalog/models.yaml.
PROVIDERS = [
    ("anthropic", "claude-haiku-4-5", 1_000_000, 5_000_000, 100_000),
    ("openai", "gpt-5-mini", 250_000, 2_000_000, 25_000),
    ("google", "gemini-2.5-flash", 300_000, 2_500_000, 75_000),
]


@pytest.mark.parametrize(("provider", "model", "price_in", "price_out", "price_cached"), PROVIDERS)
async def test_tool_call_result_final_answer_with_usage_and_cost_summed(
    rh: RunnerHarness, provider: str, model: str, price_in: int, price_out: int, price_cached: int
) -> None:
    agent = create_agent(rh.db, provider=provider, model=model, tool_ids=[SEARCH_CONTACTS], contact_name="Ana Souza")
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=1200, output_tokens=40, cache_read_tokens=300),
            Reply(text="Encontrei a Ana Souza no cadastro.", input_tokens=1500, output_tokens=25),
        ]
    )
    request = run_request(agent, [inbound(rh.db, agent, "Vocês têm o cadastro da Ana?")])
    row = await rh.run(request)

    assert row.status == "completed", (row.error_code, row.summary)
    assert row.vitality == "productive"
    assert row.final_text == "Encontrei a Ana Souza no cadastro."
    assert row.steps_count == 2
    # Usage over *all* steps, cache reads included in the input.
    assert row.tokens_in == 1200 + 300 + 1500
    assert row.tokens_out == 40 + 25
    # Cache reads at the model's cache price (they were priced as fresh input: 2026-12-05).
    expected_cost = ((1200 + 1500) * price_in + 300 * price_cached + (40 + 25) * price_out) // 1_000_000
    assert row.cost_micros == expected_cost
    assert row.would_send_to == {"channel_session_id": str(agent.channel_session_id), "chat_id": agent.chat_id}

    # The tool really ran in the MCP server, against this org's contacts.
    tool_entries = [e for e in row.tool_calls if e["kind"] == "tool"]
    assert [e["tool_name"] for e in tool_entries] == [SEARCH_CONTACTS]
    assert tool_entries[0]["is_error"] is False
    # The trace keeps what the model saw: the contact's name behind its per-run alias (docs/agent-context.md).
    assert json.loads(tool_entries[0]["result"])["contacts"][0]["name"] == "<contact_1>"
    # ... and the result went back to the model in the provider's own format, pseudonymized.
    second: Received = rh.fake.calls_to(provider)[-1]
    assert "<contact_1>" in json.dumps(second.body) and "Ana Souza" not in json.dumps(second.body)

    records = rh.outbox(agent.conversation_id)
    assert [type(r) for _, r in records] == [RunStarted, RunCompleted]
    completed = records[-1][1]
    assert isinstance(completed, RunCompleted)
    assert completed.status == "completed" and completed.final_text == row.final_text
    assert completed.tokens_in == 1200 + 1500 and completed.cache_read_tokens == 300
    assert completed.tokens_out == 65 and completed.cost_micro_usd == expected_cost
    assert completed.steps == 2 and completed.tool_calls == 1
    assert not any(isinstance(r, HandoffTriggered) for _, r in records)

    assert rh.usage(agent.org_id) == UsageTotals(1200 + 300 + 1500, 65, expected_cost, 1)

    events = await rh.events(request.run_id)
    kinds = [e.type.value for e in events]
    assert kinds[-1] == "done"
    assert {"tool_call", "tool_result", "usage", "text"} <= set(kinds)
    assert [e.seq for e in events] == sorted(e.seq for e in events)


async def test_an_anthropic_cache_write_costs_more_than_input_and_a_read_a_tenth(rh: RunnerHarness) -> None:
    """Anthropic bills a five-minute cache write at 1.25 times the input price and a read at a
    tenth: the first step writes the cached prefix, the next reads it."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-sonnet-4-6", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=200, output_tokens=20, cache_write_tokens=8_000),
            Reply(text="Pronto.", input_tokens=300, output_tokens=10, cache_read_tokens=8_000),
        ]
    )
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "completed", (row.error_code, row.summary)
    # $3 input, $15 output, $3.75 cache write, $0.30 cache read per million tokens.
    assert row.cost_micros == (500 * 3_000_000 + 30 * 15_000_000 + 8_000 * 3_750_000 + 8_000 * 300_000) // 1_000_000


async def test_anthropic_system_prompt_is_marked_for_prompt_caching(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="Olá!")])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "completed"
    system = rh.fake.calls_to("anthropic")[-1].body["system"]
    assert system[-1]["cache_control"] == {"type": "ephemeral"}
    assert "You are a helpful sales assistant." in system[-1]["text"]


async def test_google_automatic_function_calling_is_off_and_tools_are_declared(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="google", model="gemini-2.5-flash", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([Reply(text="Pronto.")])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "completed"
    body = rh.fake.calls_to("google")[-1].body
    declared = [d["name"] for t in body["tools"] for d in t["functionDeclarations"]]
    assert declared == [SEARCH_CONTACTS]


async def test_openai_compatible_base_url_per_credential(rh: RunnerHarness) -> None:
    # The credential's own base URL (a local OpenAI-compatible server) wins over the default.
    from tests.support.fake_llm import FakeLLM

    local = await FakeLLM([Reply(text="from the local server")]).start()
    try:
        agent = create_agent(rh.db, provider="openai", model="gpt-5-mini", base_url=local.openai_url)
        row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
        assert row.status == "completed" and row.final_text == "from the local server"
        assert len(local.calls_to("openai")) == 1
    finally:
        await local.stop()


async def test_a_credential_base_url_leading_to_the_metadata_service_fails_the_run_before_any_call(
    rh: RunnerHarness,
) -> None:
    """A base_url saved before the API refused it: the run fails with a stable code, nothing is called."""
    agent = create_agent(rh.db, provider="openai", model="gpt-5-mini", base_url="http://169.254.169.254/v1")
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert (row.status, row.error_code) == ("failed", "egress_refused")
    assert "169.254" not in (row.error_message or "")
    assert len(rh.fake.received) == before


async def test_demo_model_needs_no_key_and_labels_itself(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="demo", model="demo", api_key=None)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Olá, quanto custa?")]))
    assert row.status == "completed"
    assert row.final_text is not None and "not an AI" in row.final_text
    assert row.cost_micros == 0
