"""The bounded loop end to end: budgets, doom loop, handoffs, malformed calls, retries, steering, dry runs."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from switchboard.contracts import HandoffTriggered, RunCompleted, Topics
from switchboard.contracts.enums import HandoffTrigger, SteeringKind
from switchboard.credentials import seal_api_key
from switchboard.crypto import KeyRing
from switchboard.db.models import AiProviderCredential
from switchboard.db.models.agents import AiAgentVersion
from switchboard.db.session import tenant_transaction
from switchboard.run_outcomes import left_unanswered
from switchboard.tool_catalog import (
    CONVERSATION_HISTORY,
    LIST_FOLLOWUPS,
    REQUEST_HUMAN_HANDOFF,
    SCHEDULE_FOLLOWUP,
    SEARCH_CONTACTS,
    SEND_WHATSAPP_MESSAGE,
)
from tests.integration.runner.harness import RunnerHarness, allow_auto, create_agent, inbound, run_request
from tests.support.fake_llm import Call, Received, Reply, tool

pytestmark = pytest.mark.integration


def always_a_new_tool_call(**usage: int) -> object:
    """A tool-happy model: always asks for a tool, each time with new input (no doom loop)."""
    counter = itertools.count(1)

    def script(_: Received) -> Reply:
        return tool(SEARCH_CONTACTS, {"query": f"q{next(counter)}"}, **usage)

    return script


@pytest.mark.parametrize(
    ("limits", "abort_reason"),
    [
        ({"max_steps": 3}, "max_steps_reached"),
        ({"token_budget": 5_000}, "token_budget_exceeded"),
        ({"cost_budget_micros": 10_000}, "cost_budget_exceeded"),
    ],
)
async def test_each_budget_stops_a_tool_happy_model(
    rh: RunnerHarness, limits: dict[str, int], abort_reason: str
) -> None:
    agent = create_agent(
        rh.db,
        provider="anthropic",
        model="claude-sonnet-4-6",
        tool_ids=[SEARCH_CONTACTS],
        **limits,  # type: ignore[arg-type]
    )
    rh.fake.script(always_a_new_tool_call(input_tokens=900, output_tokens=60))  # type: ignore[arg-type]
    before = len(rh.fake.calls_to("anthropic"))
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Procure clientes")]))

    assert row.status == "aborted"
    assert row.abort_reason == abort_reason
    assert row.error_family == "budgetExceeded" and row.vitality == "stalled"
    assert row.final_text is None and row.would_send_to is None
    version_budget = limits.get("cost_budget_micros", 500_000)
    # Checked before every step: the cost budget is never exceeded, not even by one step.
    assert row.cost_micros <= version_budget
    assert row.tokens_in + row.tokens_out <= limits.get("token_budget", 50_000)
    calls = len(rh.fake.calls_to("anthropic")) - before
    assert row.steps_count == calls
    if abort_reason == "max_steps_reached":
        assert calls == 3
    guard = [e for e in row.tool_calls if e["kind"] == "guard" and e["name"] == "budget_stop"]
    assert guard and abort_reason in guard[0]["detail"]
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.abort_reason == abort_reason and completed.error_family == "budgetExceeded"


async def test_cost_budget_lowers_the_output_cap_of_the_last_affordable_step(rh: RunnerHarness) -> None:
    # Sonnet: $15 / M output. A 1-cent budget cannot pay 1024 output tokens (15,360 micros):
    # the step runs with a lower cap instead of not at all, and the total stays within the budget.
    agent = create_agent(rh.db, provider="anthropic", model="claude-sonnet-4-6", cost_budget_micros=10_000)
    rh.fake.script([Reply(text="Oi!", input_tokens=500, output_tokens=30)])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "completed" and row.cost_micros <= 10_000
    cap = rh.fake.calls_to("anthropic")[-1].body["max_tokens"]
    assert 64 <= cap < 1024


@pytest.mark.parametrize(
    ("provider", "model", "answer"),
    [
        ("anthropic", "claude-sonnet-4-6", "Claro! Os planos são: 1. Básico, R$ 50 por mês; 2. Prem"),
        ("openai", "gpt-5-mini", ""),  # a reasoning model that spent the whole cap thinking
        ("google", "gemini-2.5-flash", "Temos três opções de entrega, a mais rápida"),
    ],
)
async def test_an_answer_cut_off_at_the_output_cap_is_not_sent(
    rh: RunnerHarness, provider: str, model: str, answer: str
) -> None:
    agent = create_agent(rh.db, provider=provider, model=model)
    rh.fake.script([Reply(text=answer, output_tokens=1024, truncated=True)])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Quais são os planos?")]))

    assert (row.status, row.abort_reason) == ("aborted", "output_limit_reached")
    assert row.error_family == "budgetExceeded" and row.vitality == "stalled"
    assert row.final_text is None and row.would_send_to is None, "half an answer never reaches the customer"
    assert "cut off" in (row.summary or "")
    [guard] = [e for e in row.tool_calls if e["kind"] == "guard" and e["name"] == "output_limit_reached"]
    assert "output cap" in guard["detail"]
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.abort_reason == "output_limit_reached" and completed.final_text is None


@pytest.mark.parametrize(
    ("provider", "model", "refused"),
    [
        ("anthropic", "claude-sonnet-4-6", Reply(text="Posso ajudar com", stop="refusal")),
        ("openai", "gpt-5-mini", Reply(text="Claro, aqui", stop="content_filter")),
        ("openai", "gpt-4o", Reply(refusal="I can't help with that.")),  # finish_reason "stop"
        ("google", "gemini-2.5-flash", Reply(text="", stop="SAFETY")),
        ("google", "gemini-2.5-flash", Reply(text="Temos", stop="CONTINUATION")),  # more was coming
    ],
)
async def test_an_answer_the_provider_withheld_or_cut_is_not_sent(
    rh: RunnerHarness, provider: str, model: str, refused: Reply
) -> None:
    """A refusal or a content filter is not an answer: its partial text was sent as a completed
    reply, and an empty one ended "completed, empty" with nobody told. It aborts the run, nothing
    sent, so the org hears the customer is unanswered. Gemini's continuation (more under a token,
    which the SDK fetched with further billed calls the budget never saw) is cut off at the cap."""
    agent = create_agent(rh.db, provider=provider, model=model)
    rh.fake.script([refused])
    calls_before = len(rh.fake.calls_to(provider))
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Quero saber uma coisa")]))

    expected = "output_limit_reached" if refused.stop == "CONTINUATION" else "answer_refused"
    assert (row.status, row.abort_reason) == ("aborted", expected)
    assert row.final_text is None and row.would_send_to is None, "no withheld answer reaches the customer"
    calls = len(rh.fake.calls_to(provider)) - calls_before
    assert calls == 1, "one call: no continuation fetched behind the step's back"
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.abort_reason == expected and left_unanswered(completed), "the humans will be told"


async def test_a_reasoning_model_gets_room_to_think_and_keeps_half_the_cap_for_its_answer(rh: RunnerHarness) -> None:
    """The catalog marks GPT-5 and Gemini 2.5 as reasoning: their thinking counts against the cap,
    so a 1,024-token cap could come back empty. Their cap gets RUNNER_REASONING_ALLOWANCE_TOKENS
    on top, Gemini a thinking budget of half of it, GPT-5 a low effort; Claude is unchanged."""
    sent = {}
    for provider, model in (
        ("openai", "gpt-5-mini"),
        ("google", "gemini-2.5-flash"),
        ("anthropic", "claude-sonnet-4-6"),
    ):
        agent = create_agent(rh.db, provider=provider, model=model)
        rh.fake.script([Reply(text="Olá!")])
        row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
        assert row.status == "completed"
        sent[provider] = rh.fake.calls_to(provider)[-1].body
    assert (sent["openai"]["max_completion_tokens"], sent["openai"]["reasoning_effort"]) == (3072, "low")
    generation = sent["google"]["generationConfig"]
    thinking = generation["thinkingConfig"]  # the SDK writes the proto's own name, which the API takes too
    assert (generation["maxOutputTokens"], thinking.get("thinkingBudget", thinking.get("thinking_budget"))) == (
        3072,
        1536,
    )
    assert sent["anthropic"]["max_tokens"] == 1024 and "thinking" not in sent["anthropic"]


async def test_doom_loop_nudges_after_three_and_stops_after_five(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="openai", model="gpt-5-mini", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(lambda _: tool(SEARCH_CONTACTS, {"query": "same"}))
    before = len(rh.fake.calls_to("openai"))
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Procure a Ana")]))

    assert row.status == "aborted" and row.abort_reason == "looping" and row.vitality == "looping"
    requests = rh.fake.calls_to("openai")[before:]
    assert len(requests) == 6  # five executed identical calls, the sixth stops the run
    nudge = "called crm_search_contacts 3 times in a row"
    assert not any(nudge in json.dumps(r.body) for r in requests[:3])
    assert nudge in json.dumps(requests[3].body)
    tools = [e for e in row.tool_calls if e["kind"] == "tool"]
    assert len(tools) == 6 and tools[-1]["is_error"] and "repeated" in tools[-1]["result"]
    guards = [e["name"] for e in row.tool_calls if e["kind"] == "guard"]
    assert "doom_loop_nudge" in guards and "tool_loop_suspicious" in guards


@pytest.mark.parametrize("text", ["Quero FALAR com humano!", "pode ser uma pessoa reál?", "atendente, por favor"])
async def test_handoff_keyword_makes_no_model_call(rh: RunnerHarness, text: str) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, text)]))

    assert len(rh.fake.received) == before
    assert row.status == "handoff" and row.steps_count == 0 and row.error_family is None
    handoff = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, HandoffTriggered))
    assert handoff.trigger == "keyword" and handoff.matched_keyword is not None
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.status == "handoff" and completed.final_text is None and completed.would_send_to is None


async def test_a_handoff_tells_the_customer_the_versions_handoff_message(rh: RunnerHarness) -> None:
    """With ``handoff_message`` set the run's text is that message and it names where to send it
    (the notifier then sends it once); the model's own words never reach the customer."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", handoff_tool_enabled=True)
    message = "Um momento: vou chamar alguém da equipe."
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            update(AiAgentVersion).where(AiAgentVersion.id == agent.version_id).values(handoff_message=message)
        )
    keyword = await rh.run(run_request(agent, [inbound(rh.db, agent, "falar com humano")]))
    rh.fake.script([tool(REQUEST_HUMAN_HANDOFF, {"reason": "quer desconto", "urgency": "normal"})])
    by_tool = await rh.run(run_request(agent, [inbound(rh.db, agent, "Quero desconto agora")]))
    completed = [r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted)]
    for row in (keyword, by_tool):
        assert row.status == "handoff"
        [announced] = [c for c in completed if c.run_id == row.id]
        assert announced.final_text == message and announced.would_send_to is not None
        assert announced.would_send_to.chat_id == agent.chat_id


async def test_version_keywords_replace_the_defaults(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", handoff_keywords=["gerente"])
    rh.fake.script([Reply(text="Claro!")])
    assert (await rh.run(run_request(agent, [inbound(rh.db, agent, "Quero o GERENTE")]))).status == "handoff"
    assert (await rh.run(run_request(agent, [inbound(rh.db, agent, "falar com humano")]))).status == "completed"


async def test_handoff_by_tool(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", handoff_tool_enabled=True)
    rh.fake.script([tool(REQUEST_HUMAN_HANDOFF, {"reason": "cliente irritado", "urgency": "high"})])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Isso é um absurdo!")]))

    assert row.status == "handoff" and row.vitality == "blocked" and row.error_family is None
    offered = [t["name"] for t in rh.fake.calls_to("anthropic")[-1].body["tools"]]
    assert offered == [REQUEST_HUMAN_HANDOFF]
    handoff = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, HandoffTriggered))
    assert (handoff.trigger, handoff.urgency, handoff.reason) == ("tool", "high", "cliente irritado")


async def test_tool_server_down_hands_off_with_tool_failure(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([Reply(text="warm-up")])  # the runner caches the tool list; the server then goes down
    assert (await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))).status == "completed"
    rh.fake.script([tool(SEARCH_CONTACTS, {"query": "Ana"}), Reply(text="never reached")])
    await rh.stop_mcp()
    try:
        row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Procure a Ana")]))
    finally:
        await rh.start_mcp()
    assert row.status == "handoff"
    assert row.error_family == "toolFailure" and row.error_code == "tool_server_unavailable"
    handoff = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, HandoffTriggered))
    assert handoff.urgency == "high" and handoff.run_id == row.id
    tools = [e for e in row.tool_calls if e["kind"] == "tool"]
    assert tools and tools[-1]["error"] == "tool server unavailable"


async def test_malformed_tool_arguments_go_back_to_the_model(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="openai", model="gpt-5-mini", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(
        [
            Reply(calls=(Call(SEARCH_CONTACTS, {}),), raw_arguments='{"query": "Ana"'),  # not JSON
            Reply(calls=(Call(SEARCH_CONTACTS, {"limit": "many"}),)),  # JSON, wrong schema
            Reply(text="Desculpe, tente de novo."),
        ]
    )
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Procure a Ana")]))
    assert row.status == "completed"
    tools = [e for e in row.tool_calls if e["kind"] == "tool"]
    assert [t["is_error"] for t in tools] == [True, True]
    assert "not valid JSON" in tools[0]["result"] and "query" in tools[1]["result"]
    last_request = rh.fake.calls_to("openai")[-1].body["messages"]
    tool_messages = [m for m in last_request if m["role"] == "tool"]
    assert all(m["content"].startswith("ERROR:") for m in tool_messages)
    # The malformed call went back as valid JSON: an OpenAI-compatible server that parses it
    # refused the whole request (400) and the run failed instead of the model trying again.
    sent_arguments = [c["function"]["arguments"] for m in last_request for c in m.get("tool_calls") or ()]
    assert all(isinstance(json.loads(a), dict) for a in sent_arguments), sent_arguments


async def test_rate_limits_and_5xx_are_retried_with_backoff(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="google", model="gemini-2.5-flash")
    rh.fake.script([Reply(status=429), Reply(status=503), Reply(text="Olá!")])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "completed" and row.steps_count == 1
    model_steps = [e for e in row.tool_calls if e["kind"] == "model"]
    assert model_steps[0]["attempts"] == 3


async def test_an_openai_account_out_of_quota_fails_at_once_with_its_own_code(rh: RunnerHarness) -> None:
    """OpenAI says "out of credit" with a 429 (``insufficient_quota``): no retry makes credit appear.
    Retried as a rate limit, it failed as a passing upstream problem and the owner never learnt
    billing needs them."""
    agent = create_agent(rh.db, provider="openai", model="gpt-5-mini")
    quota = {
        "error": {
            "message": "You exceeded your current quota",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    rh.fake.script(lambda _: Reply(status=429, error_body=quota))
    calls_before = len(rh.fake.calls_to("openai"))
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert (row.status, row.error_code) == ("failed", "provider_quota_exceeded")
    assert row.error_family == "unknown" and "quota" in (row.error_message or "")
    assert len(rh.fake.calls_to("openai")) - calls_before == 1, "not retried"


async def test_gemini_s_retry_delay_in_its_error_body_is_read(rh: RunnerHarness) -> None:
    """Gemini says how long to wait in the body (``RetryInfo.retryDelay``), not a header: a daily
    quota's "come back in an hour" was retried at the loop's own backoff until it failed."""
    agent = create_agent(rh.db, provider="google", model="gemini-2.5-flash")
    body = {
        "error": {
            "code": 429,
            "message": "Quota exceeded",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3600s"}],
        }
    }
    rh.fake.script(lambda _: Reply(status=429, error_body=body))
    calls_before = len(rh.fake.calls_to("google"))
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert (row.status, row.error_code) == ("failed", "provider_rate_limited")
    assert len(rh.fake.calls_to("google")) - calls_before == 1, "not retried against an hour's wait"


async def test_a_retry_after_longer_than_a_step_may_wait_fails_the_step_now(rh: RunnerHarness) -> None:
    """A provider asking to come back in two minutes: the step fails now (a customer is not kept
    waiting minutes), instead of retrying at the 8 s backoff cap — too early — three more times."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script(lambda _: Reply(status=429, retry_after_s=120))
    calls_before = len(rh.fake.calls_to("anthropic"))
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert (row.status, row.error_code) == ("failed", "provider_rate_limited")
    assert len(rh.fake.calls_to("anthropic")) - calls_before == 1


async def test_transient_errors_after_all_attempts_fail_as_transient_upstream(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script(lambda _: Reply(status=529))
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "failed" and row.error_family == "transientUpstream"
    assert row.error_code == "provider_server_error"


async def test_invalid_key_fails_with_a_clear_code_and_marks_the_credential_invalid(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="openai", model="gpt-5-mini")
    rh.fake.script([Reply(status=401)])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "failed" and row.error_code == "provider_auth_invalid"
    assert len(rh.fake.calls_to("openai")) >= 1
    status = rh.scalar(
        agent.org_id, "SELECT validation_status FROM ai_provider_credentials WHERE id = :id", id=agent.credential_id
    )
    assert status == "invalid"


async def test_a_403_fails_the_run_without_calling_the_key_invalid(rh: RunnerHarness) -> None:
    """A 403 says the key may not do this (a model its workspace has no access to), not that it is
    invalid: marked "invalid or revoked", the owner was sent to replace a key that works."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-sonnet-4-6")
    rh.fake.script([Reply(status=403)])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert (row.status, row.error_code) == ("failed", "provider_forbidden")
    status = rh.scalar(
        agent.org_id, "SELECT validation_status FROM ai_provider_credentials WHERE id = :id", id=agent.credential_id
    )
    assert status != "invalid"


async def test_a_401_for_a_key_replaced_while_the_run_waited_leaves_the_new_key_alone(rh: RunnerHarness) -> None:
    """The old key was revoked; the admin put a new one in (validated) while a run that had opened
    the old one waited for its answer. That run's 401 is about the old key: the new key stays
    ``valid`` (it was marked "invalid or revoked" and the Home told the owner to replace it again)."""
    agent = create_agent(rh.db, provider="openai", model="gpt-5-mini")
    rh.fake.script([Reply(status=401, delay_s=1.5)])
    request = run_request(agent, [inbound(rh.db, agent, "Oi")])
    await rh.submit(request)
    deadline = time.monotonic() + 10
    while len(rh.fake.calls_to("openai")) == 0 or rh.run_row(request) is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    new = seal_api_key(
        KeyRing.from_settings(), org_id=agent.org_id, credential_id=agent.credential_id, api_key="sk-new"
    )
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        row = session.get_one(AiProviderCredential, agent.credential_id)
        row.ciphertext, row.iv, row.tag, row.key_id = new.ciphertext, new.iv, new.tag, new.key_id
        row.validation_status = "valid"
    failed = await rh.wait_run(request)
    assert failed.error_code == "provider_auth_invalid"
    status = rh.scalar(
        agent.org_id, "SELECT validation_status FROM ai_provider_credentials WHERE id = :id", id=agent.credential_id
    )
    assert status == "valid"


async def test_org_default_credential_is_used_when_the_version_has_none(rh: RunnerHarness) -> None:
    agent = create_agent(
        rh.db, provider="anthropic", model="claude-haiku-4-5", api_key="org-default-key-1", credential_on_version=False
    )
    rh.fake.script([Reply(text="ok")])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "completed"
    assert "org-default-key-1" in json.dumps(rh.fake.calls_to("anthropic")[-1].headers)


async def test_no_key_anywhere_fails_with_no_credential(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", api_key=None)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "failed" and row.error_code == "no_credential"


async def test_steering_guidance_joins_at_the_next_turn_and_interrupt_stops(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    steps = itertools.count(1)

    def slow_tools(_: Received) -> Reply:
        return Reply(calls=(Call(SEARCH_CONTACTS, {"query": f"q{next(steps)}"}),), delay_s=0.5)

    rh.fake.script(slow_tools)
    request = run_request(agent, [inbound(rh.db, agent, "Procure clientes")])
    before = len(rh.fake.received)
    await rh.submit(request)
    await _until(lambda: len(rh.fake.received) > before)
    await rh.submit_steering(request, SteeringKind.GUIDANCE, "Na verdade, procure o Bruno")
    await _until(lambda: "procure o Bruno" in json.dumps(rh.fake.received[-1].body), timeout_s=10)
    await rh.submit_steering(request, SteeringKind.INTERRUPT, "")
    row = await rh.wait_run(request)
    assert row.status == "aborted" and row.abort_reason == "interrupted"
    # Every tool call the model made has a result in the trace.
    assert all(e["result"] is not None for e in row.tool_calls if e["kind"] == "tool")


async def test_run_completed_lists_the_steered_messages_the_run_took_in(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script(
        [Reply(calls=(Call(SEARCH_CONTACTS, {"query": "Ana"}),), delay_s=1.0), Reply(text="Achei a Ana.", delay_s=1.0)]
    )
    first = inbound(rh.db, agent, "Procure a Ana")
    request = run_request(agent, [first])
    before = len(rh.fake.received)
    await rh.submit(request)
    await _until(lambda: len(rh.fake.received) == before + 1)
    # Arrives during step 1: taken in at the next turn boundary, so this run answers it.
    taken = inbound(rh.db, agent, "Prefiro o modelo azul")
    await rh.submit_steering(request, SteeringKind.GUIDANCE, taken.text, source=taken)
    await _until(lambda: len(rh.fake.received) == before + 2)
    assert "modelo azul" in json.dumps(rh.fake.received[-1].body, ensure_ascii=False)
    # Arrives during the last step: no boundary follows, so a follow-up run must answer it.
    late = inbound(rh.db, agent, "E o preço?")
    await rh.submit_steering(request, SteeringKind.GUIDANCE, late.text, source=late)
    row = await rh.wait_run(request)
    assert row.status == "completed"
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.message_ids == (first.message_id, taken.message_id)
    assert row.inbound_message_ids == [first.message_id, taken.message_id]


async def test_a_handoff_keyword_steered_into_a_run_hands_the_conversation_off(rh: RunnerHarness) -> None:
    """A customer who writes "atendente" while the run works gets people, as they would have before
    the run: the steered message is the run's (it lists it), so no later run would check it."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([Reply(calls=(Call(SEARCH_CONTACTS, {"query": "Ana"}),), delay_s=1.0), Reply(text="Achei a Ana.")])
    first = inbound(rh.db, agent, "Procure a Ana")
    request = run_request(agent, [first])
    before = len(rh.fake.received)
    await rh.submit(request)
    await _until(lambda: len(rh.fake.received) == before + 1)
    urgent = inbound(rh.db, agent, "Quero falar com um ATENDENTE, por favor")
    await rh.submit_steering(request, SteeringKind.GUIDANCE, urgent.text, source=urgent)
    row = await rh.wait_run(request)
    assert row.status == "handoff" and row.final_text is None
    assert len(rh.fake.received) == before + 1, "no model call after the keyword"
    records = [r for _, r in rh.outbox(agent.conversation_id)]
    [handoff] = [r for r in records if isinstance(r, HandoffTriggered)]
    assert (handoff.trigger, handoff.matched_keyword) == (HandoffTrigger.KEYWORD, "atendente")
    completed = next(r for r in records if isinstance(r, RunCompleted))
    assert completed.message_ids == (first.message_id, urgent.message_id)


async def test_dry_run_executes_no_write_and_is_recorded_as_such(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEND_WHATSAPP_MESSAGE])
    rh.fake.script([tool(SEND_WHATSAPP_MESSAGE, {"text": "Promoção!"}), Reply(text="Feito.")])
    request = run_request(agent, [inbound(rh.db, agent, "Oi")], dry_run=True)
    row = await rh.run(request)
    assert row.status == "completed" and row.is_dry_run
    assert "not_sent" in next(e for e in row.tool_calls if e["kind"] == "tool")["result"]
    outbound = rh.scalar(
        agent.org_id,
        "SELECT count(*) FROM messages WHERE conversation_id = :c AND direction = 'outbound'",
        c=agent.conversation_id,
    )
    assert outbound == 0
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.dry_run and completed.actions_executed == ()


async def test_write_tool_records_an_outbound_intent_and_an_executed_action(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEND_WHATSAPP_MESSAGE])
    allow_auto(rh.db, agent, SEND_WHATSAPP_MESSAGE)
    rh.fake.script([tool(SEND_WHATSAPP_MESSAGE, {"text": "Segue o catálogo."}), Reply(text="Enviei.")])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))
    assert row.status == "completed"
    pending = rh.scalar(
        agent.org_id,
        "SELECT delivery_status FROM messages WHERE conversation_id = :c AND direction = 'outbound' AND run_id = :r",
        c=agent.conversation_id,
        r=row.id,
    )
    assert pending == "pending"
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert [a.tool_name for a in completed.actions_executed] == [SEND_WHATSAPP_MESSAGE]


async def test_follow_up_creation_is_offered_only_when_callbacks_are_enabled(rh: RunnerHarness) -> None:
    tools = [SCHEDULE_FOLLOWUP, LIST_FOLLOWUPS, CONVERSATION_HISTORY]
    rh.fake.script([Reply(text="ok")])
    on = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=tools)
    await rh.run(run_request(on, [inbound(rh.db, on, "Oi")]))
    offered_on = [t["name"] for t in rh.fake.calls_to("anthropic")[-1].body["tools"]]
    off = create_agent(
        rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=tools, followup={"callback_enabled": False}
    )
    await rh.run(run_request(off, [inbound(rh.db, off, "Oi")]))
    offered_off = [t["name"] for t in rh.fake.calls_to("anthropic")[-1].body["tools"]]
    assert SCHEDULE_FOLLOWUP in offered_on
    assert offered_off == [LIST_FOLLOWUPS, CONVERSATION_HISTORY]


async def test_schedule_followup_through_the_tool_server(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SCHEDULE_FOLLOWUP])
    allow_auto(rh.db, agent, SCHEDULE_FOLLOWUP)
    rh.fake.script(
        [tool(SCHEDULE_FOLLOWUP, {"reason": "ligar amanhã", "due_in_minutes": 1440}), Reply(text="Combinado!")]
    )
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Me liga amanhã")]))
    assert row.status == "completed"
    reason = rh.scalar(
        agent.org_id,
        "SELECT reason FROM scheduled_followups WHERE conversation_id = :c AND created_by_run_id = :r",
        c=agent.conversation_id,
        r=row.id,
    )
    assert reason == "ligar amanhã"


async def test_history_reaches_the_model(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="openai", model="gpt-5-mini")
    inbound(rh.db, agent, "Meu nome é Carla")
    inbound(rh.db, agent, "Prazer, Carla!", direction="outbound")
    rh.fake.script([Reply(text="ok")])
    await rh.run(run_request(agent, [inbound(rh.db, agent, "Qual é o meu nome?")]))
    messages = rh.fake.calls_to("openai")[-1].body["messages"]
    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", "Meu nome é Carla"),
        ("assistant", "Prazer, Carla!"),
        ("user", "Qual é o meu nome?"),
    ]


async def test_heartbeats_are_sent_while_a_run_is_in_flight(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="devagar", delay_s=2.5)])
    request = run_request(agent, [inbound(rh.db, agent, "Oi")])
    await rh.run(request)
    beats = await rh.topic_records(Topics.RUN_HEARTBEATS, run_id=request.run_id, min_count=2)
    assert len(beats) >= 2 and all(b.runner_id == rh.settings().runner_id for _, b in beats)


async def _until(condition: object, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)
