"""The demo model's rules: a tool call for a history question, a plain labeled answer otherwise."""

from __future__ import annotations

import json

from services.runner.providers.base import (
    ModelRequest,
    StopReason,
    SystemLayer,
    TokenUsage,
    ToolOutcome,
    ToolResults,
    ToolSpec,
    UserMessage,
)
from services.runner.providers.demo import CATALOG_TEXT, LABEL, demo_reply
from switchboard.tool_catalog import CONVERSATION_HISTORY, SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE

HISTORY = ToolSpec(CONVERSATION_HISTORY, "history", {"type": "object"})
SEARCH = ToolSpec(SEARCH_CONTACTS, "search", {"type": "object"})
SEND = ToolSpec(SEND_WHATSAPP_MESSAGE, "send", {"type": "object"})


def _request(text: str, tools: tuple[ToolSpec, ...] = (HISTORY, SEARCH), *later: object) -> ModelRequest:
    return ModelRequest("demo", (SystemLayer("x", "y"),), (UserMessage(text), *later), tools, 100)  # type: ignore[arg-type]


def test_a_history_question_calls_the_history_tool_then_answers_with_what_it_found() -> None:
    step1 = demo_reply(_request("Do you have my order history?"))
    assert [c.name for c in step1.tool_calls] == [CONVERSATION_HISTORY]
    assert step1.stop_reason is StopReason.TOOL_USE and step1.text == ""
    found = json.dumps({"messages": [{"text": "a"}, {"text": "b"}], "next_before": None})
    results = ToolResults((ToolOutcome(step1.tool_calls[0].id, CONVERSATION_HISTORY, found),))
    step2 = demo_reply(_request("Do you have my order history?", (HISTORY, SEARCH), results))
    assert step2.tool_calls == () and step2.stop_reason is StopReason.END_TURN
    assert step2.text.startswith(LABEL) and "2 recent messages" in step2.text


def test_portuguese_and_accents_trigger_the_same_rule() -> None:
    assert [c.name for c in demo_reply(_request("Vocês têm o HISTÓRICO dos meus pedidos?")).tool_calls] == [
        CONVERSATION_HISTORY
    ]


def test_a_plain_message_gets_a_plain_labeled_answer_without_tools() -> None:
    for text in ("oi", "Olá! Quanto custa?", "qual o horário?", "blah"):
        reply = demo_reply(_request(text))
        assert reply.tool_calls == (), text
        assert reply.text.startswith(LABEL) and "not an AI" in reply.text
        assert reply.usage == TokenUsage()
    assert "price" in demo_reply(_request("Olá! Quanto custa?")).text


def test_no_tool_is_called_when_it_is_not_granted() -> None:
    reply = demo_reply(_request("do you have my order history?", ()))
    assert reply.tool_calls == () and "orders" in reply.text


def test_a_contact_question_searches_contacts_by_the_number_given() -> None:
    reply = demo_reply(_request("Meu cadastro está certo? 5511912345678"))
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        (SEARCH_CONTACTS, {"query": "5511912345678", "limit": 3})
    ]


def test_deterministic() -> None:
    question = "do you have my order history?"
    assert demo_reply(_request(question)) == demo_reply(_request(question))


def test_a_catalog_request_calls_the_send_tool_once_then_says_it_awaits_approval() -> None:
    step1 = demo_reply(_request("Please send me the catalog", (HISTORY, SEND)))
    [call] = step1.tool_calls
    assert (call.name, dict(call.arguments)) == (SEND_WHATSAPP_MESSAGE, {"text": CATALOG_TEXT})
    assert CATALOG_TEXT.startswith(LABEL)  # the customer would read it: labeled too
    proposed = json.dumps({"status": "proposed", "action_id": "x", "message": "Not executed"})
    results = ToolResults((ToolOutcome(call.id, SEND_WHATSAPP_MESSAGE, proposed),))
    step2 = demo_reply(_request("Please send me the catalog", (HISTORY, SEND), results))
    assert step2.tool_calls == () and step2.text.startswith(LABEL) and "approve" in step2.text
    queued = ToolResults((ToolOutcome(call.id, SEND_WHATSAPP_MESSAGE, json.dumps({"status": "queued"})),))
    assert "sent you our catalog" in demo_reply(_request("Manda o catálogo?", (SEND,), queued)).text


def test_a_catalog_request_without_the_send_tool_is_a_plain_answer() -> None:
    reply = demo_reply(_request("Please send me the catalog", (HISTORY, SEARCH)))
    assert reply.tool_calls == () and reply.text.startswith(LABEL)
