"""The built-in demo model: deterministic rules, no network, no key — and NOT an LLM.

It exists so the demo and users without a provider key can watch the whole
pipeline work (dispatch, run, tools, trace, reply). Every reply it writes says
plainly that it comes from the rule-based demo model, so nobody mistakes it
for an AI answer. Rules, in order, on the last customer message:

1. it asks about the customer's history or orders ("do you have my order
   history?", "meus pedidos", "histórico") and the conversation history tool is
   granted and not used yet in this run: call it once;
2. it asks who the customer is / about their contact record ("meu cadastro",
   "my contact") and the contact search tool is granted and not used yet: call
   it once, searching by the customer's name or number as the model was told it;
3. it asks for the catalog ("please send me the catalog", "catálogo") and the
   send tool is granted and not used yet: call ``crm_send_whatsapp_message`` once
   with a labeled catalog text — a *write*, so under the default ``propose``
   autonomy it becomes an action for the owner to approve (docs/autonomy.md); the
   answer then says whether it was sent or awaits approval;
4. otherwise answer with a fixed text chosen by keywords (orders, price, hours,
   greeting, anything else), saying what the tool returned when one was called.

A plain question therefore gets a one-step plain answer and a history question a
two-step run with a tool call — both fully predictable, which the demo's
expectations and the tests rely on. It reports zero tokens: nothing was consumed,
and the catalog prices it at 0.
"""

from __future__ import annotations

import json
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
from switchboard.tool_catalog import CONVERSATION_HISTORY, SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE

LABEL = "[Demo model — automatic rule-based reply, not an AI]"
# The first system layer of a thread-summary request (services/runner/summary.py): the demo answers
# it with a deterministic, labeled summary instead of a reply.
SUMMARY_TASK = "Summarization task"
SUMMARY_LABEL = "[Demo model — automatic rule-based summary, not an AI]"

HISTORY_KEYWORDS: tuple[str, ...] = (
    "historico",
    "history",
    "pedido",
    "pedidos",
    "order",
    "orders",
    "compra",
    "compras",
    "encomenda",
)
CONTACT_KEYWORDS: tuple[str, ...] = ("cadastro", "meus dados", "contact", "my details", "who am i")
CATALOG_KEYWORDS: tuple[str, ...] = ("catalog", "catalogue", "catalogo")
# The message the send tool is asked to deliver; labeled too, since the customer would read it.
CATALOG_TEXT = f"{LABEL} Our catalog: https://example.com/loja-demo/catalogo.pdf"

_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (HISTORY_KEYWORDS, "About your orders: a person from our team will confirm the details with you shortly."),
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


def _mentions(words: str, keys: tuple[str, ...]) -> bool:
    """Whole-word (or whole-phrase) match on folded text padded with spaces."""
    return any(f" {k} " in words for k in keys)


def _last_customer_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return message.text
    return ""


def _results_of(request: ModelRequest, tool: str) -> list[str]:
    """The contents this run's earlier calls of ``tool`` returned (empty: not called yet)."""
    return [
        result.content
        for message in request.messages
        if isinstance(message, ToolResults)
        for result in message.results
        if result.name == tool
    ]


def _count(content: str, key: str) -> int | None:
    """How many items a tool result lists under ``key`` (None when it is not that JSON shape)."""
    try:
        items = json.loads(content).get(key)
    except (ValueError, AttributeError):
        return None
    return len(items) if isinstance(items, list) else None


def _tool_call(name: str, arguments: dict[str, object]) -> ModelResponse:
    call = ToolCallRequest.parse(f"demo_{name}", name, arguments)
    return ModelResponse(text="", tool_calls=(call,), usage=TokenUsage(), stop_reason=StopReason.TOOL_USE)


def _search_query(text: str) -> str:
    """The customer's number if the message has one, else a fixed term (the search needs a non-empty query)."""
    digits = re.findall(r"\d{6,}", text)
    return digits[0] if digits else "@c.us"


def _catalog_answer(result: str) -> str:
    """What the customer is told after the send call: sent, or waiting for the owner's approval."""
    try:
        status = json.loads(result).get("status")
    except (ValueError, AttributeError):
        status = None
    if status == "proposed":
        return "I asked our team to approve sending you the catalog; you will receive it once they do."
    if status in ("queued", "sent", "approved"):
        return "I have sent you our catalog."
    return "I could not send the catalog right now; a person from our team will send it to you."


def demo_summary(request: ModelRequest) -> ModelResponse:
    """A deterministic summary: how many messages, from whom, and the customer's latest lines."""
    lines = _last_customer_text(request).splitlines()
    customer = [line.removeprefix("Customer: ") for line in lines if line.startswith("Customer: ")]
    agent = sum(1 for line in lines if line.startswith("Agent: "))
    quoted = "; ".join(f'"{c[:80]}"' for c in customer[-3:]) or "nothing"
    continues = any(layer.label == "Previous summary" for layer in request.system)
    earlier = " (continues an earlier summary)" if continues else ""
    text = (
        f"{SUMMARY_LABEL} {len(customer) + agent} earlier message(s) summarized{earlier}: "
        f"{len(customer)} from the customer, {agent} from the agent. The customer's latest lines: {quoted}."
    )
    return ModelResponse(text=text, tool_calls=(), usage=TokenUsage(), stop_reason=StopReason.END_TURN)


def demo_reply(request: ModelRequest) -> ModelResponse:
    """The deterministic answer to ``request`` (a pure function: unit-tested as such)."""
    if request.system and request.system[0].label == SUMMARY_TASK:
        return demo_summary(request)
    granted = {t.name for t in request.tools}
    text = _last_customer_text(request)
    words = f" {_fold(text)} "
    history = _results_of(request, CONVERSATION_HISTORY)
    contacts = _results_of(request, SEARCH_CONTACTS)
    sends = _results_of(request, SEND_WHATSAPP_MESSAGE)
    if _mentions(words, HISTORY_KEYWORDS) and CONVERSATION_HISTORY in granted and not history:
        return _tool_call(CONVERSATION_HISTORY, {"limit": 5})
    if _mentions(words, CONTACT_KEYWORDS) and SEARCH_CONTACTS in granted and not contacts:
        return _tool_call(SEARCH_CONTACTS, {"query": _search_query(text), "limit": 3})
    if _mentions(words, CATALOG_KEYWORDS) and SEND_WHATSAPP_MESSAGE in granted and not sends:
        return _tool_call(SEND_WHATSAPP_MESSAGE, {"text": CATALOG_TEXT})
    if sends:
        return _answer(_catalog_answer(sends[-1]))
    answer = next((reply for keys, reply in _RULES if _mentions(words, keys)), _FALLBACK)
    if history:
        found = _count(history[-1], "messages")
        seen = "the recent messages" if found is None else f"{found} recent message{'' if found == 1 else 's'}"
        answer += f" (I looked at {seen} of this conversation first.)"
    if contacts:
        found = _count(contacts[-1], "contacts")
        answer += f" (Contact search: {found if found is not None else 'some'} match(es).)"
    return _answer(answer)


def _answer(text: str) -> ModelResponse:
    return ModelResponse(text=f"{LABEL} {text}", tool_calls=(), usage=TokenUsage(), stop_reason=StopReason.END_TURN)


class DemoProvider(ModelProvider):
    name = "demo"
    requires_key = False
    is_llm = False

    async def complete(self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float) -> ModelResponse:
        return demo_reply(request)
