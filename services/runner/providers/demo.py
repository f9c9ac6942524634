"""The built-in demo model: deterministic rules, no network, no key — and NOT an LLM.

It exists so the demo and users without a provider key can watch the whole
pipeline work (dispatch, run, tools, trace, reply). Every reply it writes says
plainly that it comes from the rule-based demo model, so nobody mistakes it
for an AI answer. Rules, in order:

1. the conversation history tool is granted and not used yet: call it once;
2. otherwise answer with a fixed text chosen by keywords of the last customer
   message (greeting, price, hours, anything else), mentioning what the tool
   returned when it was called.

It reports zero tokens: nothing was consumed, and the catalog prices it at 0.
"""

from __future__ import annotations

import re
import unicodedata

from services.runner.providers.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderAccess,
    StopReason,
    TokenUsage,
    ToolCallRequest,
    ToolResults,
    UserMessage,
)
from switchboard.tool_catalog import CONVERSATION_HISTORY

LABEL = "[Demo model — automatic rule-based reply, not an AI]"

_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("preco", "quanto custa", "valor", "price", "cost"),
        "Thanks for asking about prices! A person from our team will send you the current price list shortly.",
    ),
    (("horario", "hora", "abre", "fecha", "open", "hours"), "We are open Monday to Friday, 9:00 to 18:00."),
    (("oi", "ola", "bom dia", "boa tarde", "boa noite", "hello", "hi"), "Hello! How can we help you today?"),
)
_FALLBACK = "Thanks for your message! We received it and will get back to you soon."


def _fold(text: str) -> str:
    """Lowercase, without accents or punctuation: "Olá, preço?" -> "ola preco"."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return " ".join(re.sub(r"[^\w]+", " ", plain).split())


def _last_customer_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return message.text
    return ""


def _used_history(request: ModelRequest) -> ToolResults | None:
    for message in request.messages:
        if isinstance(message, ToolResults) and any(r.name == CONVERSATION_HISTORY for r in message.results):
            return message
    return None


def demo_reply(request: ModelRequest) -> ModelResponse:
    """The deterministic answer to ``request`` (a pure function: unit-tested as such)."""
    granted = {t.name for t in request.tools}
    history = _used_history(request)
    if CONVERSATION_HISTORY in granted and history is None:
        call = ToolCallRequest.parse("demo_call_1", CONVERSATION_HISTORY, {"limit": 5})
        return ModelResponse(text="", tool_calls=(call,), usage=TokenUsage(), stop_reason=StopReason.TOOL_USE)
    words = f" {_fold(_last_customer_text(request))} "
    answer = next(
        (reply for keys, reply in _RULES if any(f" {k} " in words for k in keys)),
        _FALLBACK,
    )
    if history is not None:
        answer += " (I looked at the recent messages of this conversation first.)"
    return ModelResponse(text=f"{LABEL} {answer}", tool_calls=(), usage=TokenUsage(), stop_reason=StopReason.END_TURN)


class DemoProvider(ModelProvider):
    name = "demo"
    requires_key = False
    is_llm = False

    async def complete(self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float) -> ModelResponse:
        return demo_reply(request)
