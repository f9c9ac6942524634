"""Sub-agents and classification, the pure parts (issue 6 item 9): tool names, read-only grants, shared
budgets, absorbed usage in the loop's totals and budget checks, label parsing and the demo rules."""

from __future__ import annotations

import uuid

import pytest

from services.runner.budget import ModelPrice, RunLimits
from services.runner.classification import (
    CLASSIFY_TOOL,
    MAX_OUTPUT_TOKENS,
    MessageLabels,
    classify_inbound,
    parse_labels,
    rule_labels,
)
from services.runner.outcome import OutcomeKind
from services.runner.pii import Pseudonymizer
from services.runner.providers.base import (
    CredentialSource,
    ModelRequest,
    ModelResponse,
    ProviderAccess,
    StopReason,
    TokenUsage,
    ToolCallRequest,
)
from services.runner.subagents import TOOL_PREFIX, read_tools, shared_limits, tool_names
from services.runner.subject import VersionConfig
from switchboard.tool_catalog import REQUEST_HUMAN_HANDOFF, SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE
from tests.unit.runner.test_runner_loop_fakes import DRAFT, FakeProvider, answer, make_loop

A, B, C = uuid.UUID(int=0xA0A0A0A0 << 96), uuid.UUID(int=0xB0B0B0B0 << 96), uuid.UUID(int=0xC0C0C0C0 << 96)


def test_tool_names_are_slugs_with_ids_only_where_needed() -> None:
    names = tool_names([(A, "Estoque & Preços"), (B, "Suporte"), (C, "suporte!")])
    assert names[A] == "agent_estoque_precos"
    assert names[B] == f"agent_suporte_{B.hex[:8]}" and names[C] == f"agent_suporte_{C.hex[:8]}"
    assert tool_names([(A, "日本")])[A] == f"{TOOL_PREFIX}{A.hex[:8]}"
    long = tool_names([(A, "x" * 200)])[A]
    assert len(long) <= 64 and long.startswith(TOOL_PREFIX)


def test_a_subagent_gets_only_its_read_tools() -> None:
    granted = (SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE, REQUEST_HUMAN_HANDOFF, "finish")
    assert read_tools(granted) == (SEARCH_CONTACTS,)


def _version(**kw: int) -> VersionConfig:
    base = dict(
        id=A, agent_id=A, version_number=1, system_prompt="s", provider="fake", model="m", credential_id=None,
        tool_ids=(), max_steps=4, token_budget=50_000, cost_budget_micros=500_000, history_message_window=0,
        history_token_window=0, handoff_keywords=(), handoff_tool_enabled=False,
    )  # fmt: skip
    return VersionConfig(**{**base, **kw})  # type: ignore[arg-type]


async def test_a_subagent_shares_what_the_caller_has_left_and_keeps_its_own_steps() -> None:
    loop, _, _ = make_loop(FakeProvider([answer("x")]), limits=RunLimits(10, 10_000, 100_000, 1024, 64))
    loop.absorb([], TokenUsage(3_000, 1_000), 40_000)
    limits = shared_limits(_version(max_steps=3), loop)
    assert limits.max_steps == 3
    assert limits.token_budget == 6_000 and limits.cost_budget_micros == 60_000
    roomy = shared_limits(_version(token_budget=2_000, cost_budget_micros=10_000), loop)
    assert roomy.token_budget == 2_000 and roomy.cost_budget_micros == 10_000


async def test_absorbed_usage_is_in_the_totals_and_the_trace() -> None:
    provider = FakeProvider([answer("done", input_tokens=100, output_tokens=10)])
    loop, trace, _ = make_loop(provider, price=ModelPrice(1_000_000, 5_000_000))
    loop.absorb([{"kind": "model", "subagent_id": "s"}], TokenUsage(500, 50), 777)
    outcome = await loop.run(DRAFT)
    assert outcome.usage == TokenUsage(600, 60)
    # Own calls at the loop's price, absorbed work at the cost it was priced at.
    assert outcome.cost_micros == (100 * 1_000_000 + 10 * 5_000_000) // 1_000_000 + 777
    assert trace.entries[0] == {"kind": "model", "subagent_id": "s"}


async def test_absorbed_usage_counts_against_the_budget_of_the_next_step() -> None:
    loop, _, _ = make_loop(FakeProvider([answer("never")]), limits=RunLimits(10, 5_000, 1_000_000, 1024, 64))
    loop.absorb([], TokenUsage(4_900, 50), 0)
    outcome = await loop.run(DRAFT)
    assert outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "token_budget_exceeded"


def test_labels_must_match_the_schema() -> None:
    assert parse_labels({"intent": "Ask Price", "urgency": "low", "category": "sales", "tone": "positive"}) == (
        MessageLabels("ask_price", "low", "sales", "positive")
    )
    assert parse_labels({"intent": "x", "urgency": "soon", "category": "sales", "tone": "positive"}) is None
    assert parse_labels({"intent": "x", "urgency": "low", "category": "sales"}) is None
    assert parse_labels({"intent": "x", "urgency": "low", "category": "sales", "tone": "calm", "extra": 1}) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Quanto custa o plano?", ("ask_price", "normal", "sales", "neutral")),
        ("Quero agendar um horário, obrigada", ("book_appointment", "normal", "scheduling", "positive")),
        ("Isso é um absurdo, péssimo atendimento", ("complain", "high", "complaint", "angry")),
        ("URGENTE: o sistema não funciona", ("get_help", "urgent", "support", "neutral")),
        ("Bom dia", ("ask_information", "normal", "information", "neutral")),
    ],
)
def test_demo_rules_are_deterministic(text: str, expected: tuple[str, str, str, str]) -> None:
    assert rule_labels(text) == MessageLabels(*expected)
    assert rule_labels(text) == rule_labels(text)


class _Structured(FakeProvider):
    async def complete_structured(
        self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float
    ) -> ModelResponse:
        self.requests.append(request)
        args = {"intent": "ask_price", "urgency": "normal", "category": "sales", "tone": "neutral"}
        return ModelResponse(
            "", (ToolCallRequest.parse("c1", CLASSIFY_TOOL.name, args),), TokenUsage(40, 8), StopReason.TOOL_USE
        )


async def test_classification_request_is_sealed_and_priced() -> None:
    provider = _Structured([answer("unused")])
    pii = Pseudonymizer(names=["Maria Rossi"])
    result = await classify_inbound(
        "Sono Maria Rossi, maria@example.com: quanto costa?",
        provider=provider,
        access=ProviderAccess(CredentialSource.NONE, None),
        model="m",
        price=ModelPrice(1_000_000, 5_000_000),
        pii=pii,
        timeout_s=5,
        reasoning_allowance_tokens=2048,
    )
    assert result.labels == MessageLabels("ask_price", "normal", "sales", "neutral")
    assert result.usage == TokenUsage(40, 8) and result.cost_micros == 80
    sent = provider.requests[0]
    assert sent.tools == (CLASSIFY_TOOL,)
    text = sent.messages[0].text  # type: ignore[union-attr]
    assert "Maria" not in text and "maria@example.com" not in text


async def test_a_reasoning_model_classifies_with_the_runners_reasoning_allowance() -> None:
    """RUNNER_REASONING_ALLOWANCE_TOKENS holds for helper calls too, not a fixed figure."""
    caps = []
    for price, allowance in (
        (ModelPrice(reasoning=True), 3000),
        (ModelPrice(reasoning=True), 500),
        (ModelPrice(), 3000),
    ):
        provider = _Structured([answer("unused")])
        await classify_inbound(
            "quanto custa?",
            provider=provider,
            access=ProviderAccess(CredentialSource.NONE, None),
            model="m",
            price=price,
            pii=Pseudonymizer(),
            timeout_s=5,
            reasoning_allowance_tokens=allowance,
        )
        sent = provider.requests[0]
        caps.append((sent.max_output_tokens - MAX_OUTPUT_TOKENS, sent.reasoning_tokens))
    assert caps == [(3000, (MAX_OUTPUT_TOKENS + 3000) // 2), (500, (MAX_OUTPUT_TOKENS + 500) // 2), (0, 0)]
