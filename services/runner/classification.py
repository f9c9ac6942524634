"""The optional classification step [003 "classifier", issue 6 item 9]: before the agent's loop, label
the inbound message(s) with intent, urgency, category and tone.

Structured output as a *tool-shaped answer*: the request offers one tool whose input schema is
the wanted JSON and the provider adapter forces that tool (``ModelProvider.complete_structured``);
the call's arguments are the labels. It works the same with the three official SDKs and the fake
provider, and needs no provider-specific JSON mode. The request is sealed by the run's
``Pseudonymizer`` like every other. The built-in demo model is not an LLM: it labels by
deterministic keyword rules (``rule_labels``), at zero tokens.

A classification never fails the run: a provider error or an answer that does not match the
schema leaves the run unclassified (a ``guard`` entry says why) and the agent runs as usual.
Its tokens and cost are counted in the run (``AgentLoop.absorb``).
"""

from __future__ import annotations

import asyncio
import json
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import jsonschema

from services.runner.budget import ModelPrice, RunLimits, estimate_tokens, helper_output
from services.runner.context import PromptDraft
from services.runner.loop import model_entry
from services.runner.pii import Pseudonymizer
from services.runner.providers.base import (
    ModelProvider,
    ModelRequest,
    ProviderAccess,
    ProviderError,
    SystemLayer,
    TokenUsage,
    ToolSpec,
    UserMessage,
)
from switchboard.contracts.enums import Urgency

CLASSIFY_TOOL_NAME = "record_classification"
CATEGORIES: tuple[str, ...] = ("sales", "support", "billing", "scheduling", "complaint", "information", "other")
TONES: tuple[str, ...] = ("positive", "neutral", "negative", "angry")
URGENCIES: tuple[str, ...] = tuple(u.value for u in Urgency)
MAX_OUTPUT_TOKENS = 256
LAYER_LABEL = "Classification"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "intent": {"type": "string", "minLength": 1, "maxLength": 80, "description": "snake_case, e.g. ask_price"},
        "urgency": {"type": "string", "enum": list(URGENCIES)},
        "category": {"type": "string", "enum": list(CATEGORIES)},
        "tone": {"type": "string", "enum": list(TONES)},
    },
    "required": ["intent", "urgency", "category", "tone"],
    "additionalProperties": False,
}
CLASSIFY_TOOL = ToolSpec(
    name=CLASSIFY_TOOL_NAME, description="Record the labels of the customer's message(s).", input_schema=SCHEMA
)
INSTRUCTIONS = (
    "Classify the customer's message(s) below. Call record_classification exactly once with: intent (a short "
    "snake_case label of what the customer wants), urgency (low, normal, high, urgent), category "
    f"({', '.join(CATEGORIES)}) and tone ({', '.join(TONES)}). Do not answer the customer."
)


@dataclass(frozen=True, slots=True)
class MessageLabels:
    intent: str
    urgency: str
    category: str
    tone: str

    def as_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LabelResult:
    """What the step produced: the labels (None when it failed), its usage, cost and trace entries."""

    labels: MessageLabels | None
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_micros: int = 0
    entries: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def parse_labels(raw: Mapping[str, Any]) -> MessageLabels | None:
    """The labels when ``raw`` matches the schema (intent normalized to snake_case), else None."""
    try:
        jsonschema.validate(dict(raw), SCHEMA)
    except jsonschema.ValidationError:
        return None
    intent = "_".join(str(raw["intent"]).strip().lower().split())[:80]
    return MessageLabels(intent=intent, urgency=raw["urgency"], category=raw["category"], tone=raw["tone"])


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return " " + "".join(c if c.isalnum() else " " for c in decomposed if not unicodedata.combining(c)) + " "


# Deterministic rules for the demo model, first match wins (Portuguese, Italian, English keywords).
_CATEGORY_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("complaint", "complain", ("reclamacao", "reclamo", "complaint", "pessimo", "terrible", "absurdo")),
    ("billing", "billing_question", ("boleto", "fatura", "fattura", "invoice", "refund", "reembolso", "cobranca")),
    ("scheduling", "book_appointment", ("agendar", "horario", "appuntamento", "appointment", "book", "reserva")),
    ("sales", "ask_price", ("preco", "prezzo", "price", "quanto custa", "comprar", "buy", "orcamento")),
    ("support", "get_help", ("problema", "nao funciona", "broken", "not working", "ajuda", "help", "aiuto")),
)
_URGENT = ("urgente", "urgent", "agora", "subito", "emergencia", "emergency", "asap")
_ANGRY = ("absurdo", "pessimo", "terrible", "ridiculo", "vergonha", "!!!")
_POSITIVE = ("obrigad", "grazie", "thank", "otimo", "perfeito", "great")


def rule_labels(text: str) -> MessageLabels:
    """The demo model's deterministic labels (keyword rules, accent- and case-insensitive)."""
    words = _fold(text)
    category, intent = "information", "ask_information"
    for name, rule_intent, keywords in _CATEGORY_RULES:
        if any(f" {k} " in words or (k.endswith("d") and f" {k}" in words) for k in keywords):
            category, intent = name, rule_intent
            break
    if not text.strip():
        category, intent = "other", "none"
    urgent = any(f" {k} " in words for k in _URGENT)
    angry = "!!!" in text or any(f" {k} " in words for k in _ANGRY)
    positive = any(f" {k}" in words for k in _POSITIVE)
    tone = "angry" if angry else "positive" if positive else "negative" if category == "complaint" else "neutral"
    urgency = "urgent" if urgent else "high" if angry or category == "complaint" else "normal"
    return MessageLabels(intent=intent, urgency=urgency, category=category, tone=tone)


def with_labels_layer(draft: PromptDraft, labels: MessageLabels) -> PromptDraft:
    """The agent's prompt with a last system layer holding the labels (so the agent can use them)."""
    text = (
        f"The customer's message(s) were classified before this run: intent {labels.intent}, urgency "
        f"{labels.urgency}, category {labels.category}, tone {labels.tone}."
    )
    return PromptDraft(
        system=(*draft.system, SystemLayer(LAYER_LABEL, text)), messages=draft.messages, tools=draft.tools
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


async def classify_inbound(
    text: str,
    *,
    provider: ModelProvider,
    access: ProviderAccess,
    model: str,
    price: ModelPrice,
    pii: Pseudonymizer,
    timeout_s: float,
    reasoning_allowance_tokens: int,
    budget: RunLimits | None = None,
) -> LabelResult:
    """Label ``text`` (the run's inbound messages) with one structured-output call — only when the
    run's budget (``budget``: its token and cost limits) covers that call's worst case: the call is
    the run's, and a long message must not take the run past its budget before the loop starts."""
    started = time.monotonic()
    started_at = _now()
    if not provider.is_llm:
        ruled = rule_labels(text)
        entry = {
            "step": 0,
            "kind": "guard",
            "name": "classification",
            "detail": json.dumps(ruled.as_json()),
            "at": _now(),
        }
        return LabelResult(ruled, entries=(entry,))
    cap, reasoning_tokens = helper_output(price, MAX_OUTPUT_TOKENS, reasoning_allowance_tokens)
    if budget is not None:
        worst_input = estimate_tokens(INSTRUCTIONS + text + json.dumps(CLASSIFY_TOOL.input_schema))
        worst_cost = price.worst_input_cost(worst_input) + price.output_cost(cap)
        if worst_input + cap > budget.token_budget or worst_cost > budget.cost_budget_micros:
            detail = f"the run's budget cannot cover the labeling call (up to {worst_cost} micro-USD)"
            return LabelResult(
                None,
                entries=(
                    {"step": 0, "kind": "guard", "name": "classification_skipped", "detail": detail, "at": _now()},
                ),
            )
    request = pii.seal(
        ModelRequest(
            model=model,
            system=(SystemLayer(LAYER_LABEL, INSTRUCTIONS),),
            messages=(UserMessage(text),),
            tools=(CLASSIFY_TOOL,),
            max_output_tokens=cap,
            reasoning_tokens=reasoning_tokens,
        )
    )
    try:
        async with asyncio.timeout(timeout_s):
            response = await provider.complete_structured(request, access, timeout_s=timeout_s)
    except (ProviderError, TimeoutError) as exc:
        code = exc.code if isinstance(exc, ProviderError) else "provider_timeout"
        entry = {"step": 0, "kind": "guard", "name": "classification_failed", "detail": code, "at": _now()}
        return LabelResult(None, entries=(entry,))
    cost = price.cost(response.usage)
    call = next((c for c in response.tool_calls if c.name == CLASSIFY_TOOL_NAME and c.error is None), None)
    labels = parse_labels(call.arguments) if call is not None else None
    entry = model_entry(
        response,
        cost,
        step=0,
        started=started,
        started_at=started_at,
        attempts=1,
        max_output_tokens=cap,
        text=json.dumps(labels.as_json()) if labels else None,
    )
    entries: list[dict[str, Any]] = [{**entry, "purpose": "classification"}]
    if labels is None:
        entries.append(
            {"step": 0, "kind": "guard", "name": "classification_failed", "detail": "answer off schema", "at": _now()}
        )
    return LabelResult(labels, usage=response.usage, cost_micros=cost, entries=tuple(entries))
