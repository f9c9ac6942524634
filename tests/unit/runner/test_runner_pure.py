"""Pure pieces of the runner: budgets, keywords, classification, tool grants, parsing, tokens, the demo model."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from types import SimpleNamespace

import pytest

from services.runner.budget import (
    COST_BUDGET_EXCEEDED,
    MAX_STEPS_REACHED,
    TOKEN_BUDGET_EXCEEDED,
    ModelPrice,
    RunLimits,
    admit_step,
    estimate_tokens,
    reasoning_share,
)
from services.runner.execution import RunExecutor
from services.runner.handoff import DEFAULT_HANDOFF_KEYWORDS, match_handoff_keyword
from services.runner.outcome import HandoffRequest, LoopOutcome, OutcomeKind, RunFailure, classify
from services.runner.providers.base import (
    ModelRequest,
    ProviderError,
    ProviderErrorKind,
    SystemLayer,
    TokenUsage,
    ToolCallRequest,
    ToolOutcome,
    ToolResults,
    ToolSpec,
    UserMessage,
    kind_for_status,
)
from services.runner.providers.demo import LABEL, demo_reply
from services.runner.providers.google import thinking_budget
from services.runner.settings import RunnerSettings
from services.runner.subject import VersionConfig
from switchboard.contracts.enums import ErrorFamily, HandoffTrigger, RunStatus, Urgency, Vitality
from switchboard.run_tokens import RunTokenClaims, RunTokenError, mint_run_token, verify_run_token
from switchboard.tool_catalog import CONVERSATION_HISTORY, REQUEST_HUMAN_HANDOFF, SCHEDULE_FOLLOWUP

LIMITS = RunLimits(
    max_steps=5, token_budget=10_000, cost_budget_micros=100_000, max_output_tokens=1024, min_output_tokens=64
)
SONNET = ModelPrice(input_micros_per_mtok=3_000_000, output_micros_per_mtok=15_000_000)


# ---------------------------------------------------------------- budgets


def test_cost_is_usage_times_catalog_price_in_micro_usd() -> None:
    usage = TokenUsage(input_tokens=1000, output_tokens=500, cache_read_tokens=200, cache_write_tokens=100)
    assert SONNET.cost(usage) == (1300 * 3_000_000 + 500 * 15_000_000) // 1_000_000
    cached = ModelPrice(
        3_000_000, 15_000_000, cache_read_micros_per_mtok=300_000, cache_write_micros_per_mtok=3_750_000
    )
    assert cached.cost(usage) == (1000 * 3_000_000 + 500 * 15_000_000 + 200 * 300_000 + 100 * 3_750_000) // 1_000_000
    assert ModelPrice().cost(usage) == 0  # no price in the catalog: cost 0, not an error


def test_max_steps_is_checked_first() -> None:
    admission = admit_step(LIMITS, SONNET, steps_done=5, used=TokenUsage(), cost_micros=0, next_input_tokens=10)
    assert admission.refusal == MAX_STEPS_REACHED


def test_token_budget_refuses_a_step_that_could_overrun_it() -> None:
    used = TokenUsage(input_tokens=8000, output_tokens=1000)
    admission = admit_step(LIMITS, ModelPrice(), steps_done=1, used=used, cost_micros=0, next_input_tokens=950)
    assert admission.refusal == TOKEN_BUDGET_EXCEEDED
    ok = admit_step(LIMITS, ModelPrice(), steps_done=1, used=used, cost_micros=0, next_input_tokens=500)
    assert ok.admitted and ok.max_output_tokens == 10_000 - 9000 - 500


def test_cost_budget_lowers_the_output_cap_then_refuses() -> None:
    # 100,000 micros left; 1000 input tokens cost 3,000; 97,000 pays 6,466 output tokens at $15/M.
    admission = admit_step(LIMITS, SONNET, steps_done=0, used=TokenUsage(), cost_micros=0, next_input_tokens=1000)
    assert admission.admitted and admission.max_output_tokens == 1024
    tight = admit_step(LIMITS, SONNET, steps_done=0, used=TokenUsage(), cost_micros=95_000, next_input_tokens=1000)
    assert tight.admitted and tight.max_output_tokens == (100_000 - 95_000 - 3000) * 1_000_000 // 15_000_000
    assert tight.projected_cost_micros <= 100_000
    broke = admit_step(LIMITS, SONNET, steps_done=0, used=TokenUsage(), cost_micros=99_000, next_input_tokens=1000)
    assert broke.refusal == COST_BUDGET_EXCEEDED


@pytest.mark.parametrize("spent", range(0, 100_000, 7_919))
def test_an_admitted_step_can_never_exceed_the_cost_budget(spent: int) -> None:
    admission = admit_step(LIMITS, SONNET, steps_done=0, used=TokenUsage(), cost_micros=spent, next_input_tokens=700)
    if admission.admitted:
        worst = SONNET.cost(TokenUsage(input_tokens=700, output_tokens=admission.max_output_tokens))
        assert spent + worst <= LIMITS.cost_budget_micros


def test_estimate_is_deliberately_high() -> None:
    english = "The quick brown fox jumps over the lazy dog. " * 20
    assert estimate_tokens(english) >= len(english) / 4
    accented = "ação coração informação " * 20
    assert estimate_tokens(accented) >= len(accented) / 3


# ---------------------------------------------------------------- keywords


@pytest.mark.parametrize(
    "text",
    ["Quero FALAR com humano", "falar   com humano!", "Posso falar com um atendente?", "uma PESSOA REÁL por favor"],
)
def test_keywords_match_case_and_accent_insensitively(text: str) -> None:
    assert match_handoff_keyword(text, DEFAULT_HANDOFF_KEYWORDS) is not None


@pytest.mark.parametrize("text", ["Quanto custa?", "desatendente", "falar com humanos"])
def test_keywords_match_whole_words_only(text: str) -> None:
    assert match_handoff_keyword(text, DEFAULT_HANDOFF_KEYWORDS) is None


def test_accented_keyword_matches_plain_text() -> None:
    match = match_handoff_keyword("quero o responsavel", ["responsável"])
    assert match is not None and match.keyword == "responsável"


# ---------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (LoopOutcome(OutcomeKind.ANSWERED, final_text="Oi"), (RunStatus.COMPLETED, Vitality.COMPLETED, None)),
        (
            LoopOutcome(OutcomeKind.ANSWERED, final_text="Oi", tool_calls=2),
            (RunStatus.COMPLETED, Vitality.PRODUCTIVE, None),
        ),
        (
            LoopOutcome(OutcomeKind.ANSWERED, final_text=" "),
            (RunStatus.COMPLETED, Vitality.EMPTY, ErrorFamily.SILENT_RUN),
        ),
        (
            LoopOutcome(OutcomeKind.ABORTED, abort_reason="cost_budget_exceeded"),
            (RunStatus.ABORTED, Vitality.STALLED, ErrorFamily.BUDGET_EXCEEDED),
        ),
        (LoopOutcome(OutcomeKind.ABORTED, abort_reason="looping"), (RunStatus.ABORTED, Vitality.LOOPING, None)),
        # Paused on a proposal: waiting for the owner, not a fault.
        (
            LoopOutcome(OutcomeKind.ABORTED, abort_reason="awaiting_approval"),
            (RunStatus.ABORTED, Vitality.BLOCKED, None),
        ),
        (
            LoopOutcome(OutcomeKind.ABORTED, abort_reason="silence_timeout"),
            (RunStatus.ABORTED, Vitality.STALLED, ErrorFamily.SILENT_RUN),
        ),
        (
            LoopOutcome(OutcomeKind.FAILED, failure=RunFailure("x", "y", ErrorFamily.TRANSIENT_UPSTREAM)),
            (RunStatus.FAILED, Vitality.FAILED, ErrorFamily.TRANSIENT_UPSTREAM),
        ),
        (LoopOutcome(OutcomeKind.HANDED_BACK), (RunStatus.FAILED, Vitality.DEAD, ErrorFamily.PROCESS_LOST)),
        (
            LoopOutcome(
                OutcomeKind.HANDOFF,
                handoff=HandoffRequest(
                    "down",
                    Urgency.HIGH,
                    HandoffTrigger.TOOL,
                    failure=RunFailure("tool_server_unavailable", "down", ErrorFamily.TOOL_FAILURE),
                ),
            ),
            (RunStatus.HANDOFF, Vitality.BLOCKED, ErrorFamily.TOOL_FAILURE),
        ),
    ],
)
def test_classification(outcome: LoopOutcome, expected: tuple[RunStatus, Vitality, ErrorFamily | None]) -> None:
    c = classify(outcome)
    assert (c.status, c.vitality, c.error_family) == expected


# ---------------------------------------------------------------- tools


def _version(**overrides: object) -> VersionConfig:
    values: dict[str, object] = {
        "id": uuid.uuid4(),
        "agent_id": uuid.uuid4(),
        "version_number": 1,
        "system_prompt": "x",
        "provider": "anthropic",
        "model": "m",
        "credential_id": None,
        "tool_ids": (CONVERSATION_HISTORY, SCHEDULE_FOLLOWUP),
        "max_steps": 5,
        "token_budget": 5000,
        "cost_budget_micros": 10_000,
        "history_message_window": 20,
        "history_token_window": 8000,
        "handoff_keywords": (),
        "handoff_tool_enabled": True,
    }
    values.update(overrides)
    return VersionConfig(**values)  # type: ignore[arg-type]


def test_granted_tools_follow_the_version() -> None:
    assert _version().granted_tools() == (CONVERSATION_HISTORY, SCHEDULE_FOLLOWUP, REQUEST_HUMAN_HANDOFF)
    assert _version(handoff_tool_enabled=False).granted_tools() == (CONVERSATION_HISTORY, SCHEDULE_FOLLOWUP)
    off = _version(followup={"callback_enabled": False})
    assert off.granted_tools() == (CONVERSATION_HISTORY, REQUEST_HUMAN_HANDOFF)


def test_the_versions_silence_timeout_wins_over_the_process_default() -> None:
    assert _version(silence_timeout_minutes=7).silence_timeout_s(900.0) == 420.0
    assert _version(silence_timeout_minutes=None).silence_timeout_s(900.0) == 900.0


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('{"a": 1}', None),
        ("{bad", "arguments are not valid JSON"),
        ("[1]", "arguments must be a JSON object"),
        ("", None),
    ],
)
def test_tool_call_arguments_are_parsed_never_trusted(raw: str, error: str | None) -> None:
    call = ToolCallRequest.parse("c1", "t", raw)
    assert call.error == error


def test_identical_calls_share_a_signature_whatever_the_key_order() -> None:
    a = ToolCallRequest.parse("1", "t", '{"a": 1, "b": 2}')
    b = ToolCallRequest.parse("2", "t", {"b": 2, "a": 1})
    assert a.signature == b.signature


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (401, ProviderErrorKind.AUTH, False),
        (403, ProviderErrorKind.FORBIDDEN, False),  # valid key, no access: not "invalid"
        (429, ProviderErrorKind.RATE_LIMITED, True),
        (500, ProviderErrorKind.SERVER, True),
        (529, ProviderErrorKind.SERVER, True),
        (400, ProviderErrorKind.BAD_REQUEST, False),
    ],
)
def test_provider_errors_are_classified_and_never_carry_provider_text(
    status: int, kind: ProviderErrorKind, retryable: bool
) -> None:
    error = ProviderError(kind_for_status(status), provider="openai", status=status)
    assert error.kind is kind and error.retryable is retryable
    assert str(error) == f"openai call failed: {kind.value} (HTTP {status})"


# ---------------------------------------------------------------- demo model


def _request(text: str, tools: tuple[ToolSpec, ...] = (), messages: tuple[object, ...] = ()) -> ModelRequest:
    return ModelRequest("demo", (SystemLayer("x", "y"),), (UserMessage(text), *messages), tools, 100)  # type: ignore[arg-type]


def test_demo_model_is_deterministic_and_labeled() -> None:
    first = demo_reply(_request("Olá! Quanto custa?"))
    assert first == demo_reply(_request("Olá! Quanto custa?"))
    assert first.text.startswith(LABEL) and "price" in first.text
    assert first.usage == TokenUsage()


def test_demo_model_uses_the_history_tool_once() -> None:
    spec = ToolSpec(CONVERSATION_HISTORY, "history", {"type": "object"})
    step1 = demo_reply(_request("do you have my order history?", (spec,)))
    assert [c.name for c in step1.tool_calls] == [CONVERSATION_HISTORY]
    results = ToolResults((ToolOutcome("demo_call_1", CONVERSATION_HISTORY, "{}"),))
    step2 = demo_reply(_request("do you have my order history?", (spec,), (results,)))
    assert not step2.tool_calls and step2.text.startswith(LABEL)


# ---------------------------------------------------------------- run tokens


def _claims(**overrides: object) -> RunTokenClaims:
    values: dict[str, object] = {
        "org_id": uuid.uuid4(),
        "run_id": uuid.uuid4(),
        "agent_id": uuid.uuid4(),
        "conversation_id": uuid.uuid4(),
        "contact_id": None,
        "channel_session_id": None,
        "tools": frozenset({"crm_search_contacts"}),
        "dry_run": False,
        "expires_at": int(time.time()) + 60,
    }
    values.update(overrides)
    return RunTokenClaims(**values)  # type: ignore[arg-type]


def test_run_token_round_trip_and_refusals() -> None:
    secret = b"s" * 32
    claims = _claims()
    token = mint_run_token(secret, claims)
    back = verify_run_token(secret, token)
    assert back.org_id == claims.org_id and back.allows("crm_search_contacts") and not back.allows("other")
    with pytest.raises(RunTokenError) as forged:
        verify_run_token(b"x" * 32, token)
    assert forged.value.code == "bad_signature"
    with pytest.raises(RunTokenError) as expired:
        verify_run_token(secret, mint_run_token(secret, _claims(expires_at=int(time.time()) - 1)))
    assert expired.value.code == "expired"
    tampered = token.replace(token.split(".")[0][-4:], "AAAA")
    with pytest.raises(RunTokenError):
        verify_run_token(secret, tampered)


@pytest.mark.parametrize("max_steps", [1, 10, 60])
def test_a_run_token_outlives_the_longest_run_its_version_allows(max_steps: int) -> None:
    """Every step at its timeouts (each model call retried to the limit, then a tool call): a
    token that expired mid-run would fail the tool calls and hand the conversation off."""
    settings = RunnerSettings()
    executor = SimpleNamespace(_settings=settings)
    ttl = RunExecutor._token_ttl_s(executor, SimpleNamespace(version=SimpleNamespace(max_steps=max_steps)))  # type: ignore[arg-type]
    longest = max_steps * (
        settings.model_call_timeout_s * settings.provider_max_attempts + settings.tool_call_timeout_s
    )
    assert ttl >= longest and ttl >= settings.mcp_token_ttl_s


def test_a_reasoning_model_gets_its_allowance_at_admission_and_half_the_cap_to_think() -> None:
    """Decided per model at admission, so a sub-agent on a reasoning model under a Claude caller
    (sharing the caller's limits) gets it too."""
    limits = replace(LIMITS, max_output_tokens=1024, reasoning_allowance_tokens=2048)
    plain = admit_step(limits, ModelPrice(), steps_done=0, used=TokenUsage(), cost_micros=0, next_input_tokens=10)
    thinking = ModelPrice(reasoning=True)
    reasoning = admit_step(limits, thinking, steps_done=0, used=TokenUsage(), cost_micros=0, next_input_tokens=10)
    assert (plain.max_output_tokens, reasoning.max_output_tokens) == (1024, 3072)
    assert (reasoning_share(ModelPrice(), 1024), reasoning_share(thinking, 3072)) == (0, 1536)


def test_gemini_thinking_budgets_stay_within_what_every_2_5_model_accepts() -> None:
    assert [thinking_budget(n) for n in (32, 128, 1536, 48_000)] == [128, 128, 1536, 24_576]
