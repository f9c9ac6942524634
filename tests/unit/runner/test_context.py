"""Layered prompt composition (issue 6 item 1): order, labels, tool names, history windows. Pure, no I/O."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from services.runner.context import (
    LITERAL_HISTORY_WINDOW_CHARS,
    UNAVAILABLE_TOOL,
    compose,
    default_builders,
    history_window,
    prompt_record,
)
from services.runner.providers.base import AssistantMessage, ToolSpec, UserMessage
from services.runner.subject import ConversationInfo, HistoryItem, RunSubject, VersionConfig
from switchboard.contracts import InboundMessage, RunRequested, WakeContext
from switchboard.contracts.enums import WakeReason
from switchboard.tool_catalog import CONVERSATION_HISTORY, REQUEST_HUMAN_HANDOFF, SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE

LABELS = [
    "Identity",
    "Tools",
    "System prompt",
    "Persona and team brief",
    "Skills",
    "Run contract",
    "Wake context",
    "Memory",
    "Conversation",
]


def spec(name: str) -> ToolSpec:
    return ToolSpec(name, f"{name} does things\nsecond line", {"type": "object"})


def subject(
    history: tuple[HistoryItem, ...] = (),
    *,
    window: int = 20,
    token_window: int = 8000,
    system_prompt: str = "Be kind.",
    persona: str | None = "Warm, concise.",
    skills: tuple[str, ...] = ("pricing",),
    summary: str | None = "Asked about prices last week.",
    attempt: int = 1,
) -> RunSubject:
    now = datetime.now(UTC)
    request = RunRequested(
        org_id=uuid.uuid4(),
        conversation_id=uuid.uuid4(),
        contact_id=uuid.uuid4(),
        channel_session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        agent_id=uuid.uuid4(),
        version_id=uuid.uuid4(),
        attempt=attempt,
        wake_reason=WakeReason.USER_MESSAGE,
        wake_context=WakeContext(message_id=uuid.uuid4()),
        messages=(InboundMessage(message_id=uuid.uuid4(), external_id="x", chat_id="c", text="new", received_at=now),),
    )
    version = VersionConfig(
        id=request.version_id,
        agent_id=request.agent_id,
        version_number=1,
        system_prompt=system_prompt,
        provider="anthropic",
        model="m",
        credential_id=None,
        tool_ids=(),
        max_steps=3,
        token_budget=5000,
        cost_budget_micros=10_000,
        history_message_window=window,
        history_token_window=token_window,
        handoff_keywords=(),
        handoff_tool_enabled=False,
        persona=persona,
        skills=skills,
    )
    conversation = ConversationInfo(uuid.uuid4(), "c", request.channel_session_id, "Ana", summary=summary)
    return RunSubject(request, "Bot", version, conversation, history)


def history(*texts: tuple[str, str], chars: int = 0) -> tuple[HistoryItem, ...]:
    base = datetime.now(UTC)
    items = [
        HistoryItem(uuid.uuid4(), d, t + "x" * chars, base - timedelta(minutes=len(texts) - i))
        for i, (d, t) in enumerate(texts)
    ]
    return tuple(reversed(items))  # newest first, as loaded


async def test_every_layer_in_the_fixed_order_with_its_label() -> None:
    run = subject(history(("inbound", "a"), ("outbound", "b")), attempt=2)
    draft = await compose(run, [spec(SEARCH_CONTACTS)], default_builders())
    assert [layer.label for layer in draft.system] == LABELS
    text = {layer.label: layer.text for layer in draft.system}
    request = run.request
    assert str(request.agent_id) in text["Identity"] and str(request.org_id) in text["Identity"]
    assert "'Bot'" in text["Identity"] and "pass exactly these ids" in text["Identity"]
    assert text["Tools"] == f"You may call only these tools:\n- {SEARCH_CONTACTS}: {SEARCH_CONTACTS} does things"
    assert text["System prompt"] == "Be kind." and text["Persona and team brief"] == "Warm, concise."
    assert text["Skills"] == "pricing" and text["Run contract"].startswith("Mode: reply.")
    assert "userMessage" in text["Wake context"] and str(request.wake_context.message_id) in text["Wake context"]
    assert "attempt 2" in text["Wake context"]
    assert "Asked about prices" in text["Memory"] and "Ana" in text["Conversation"]


async def test_optional_layers_are_left_out_when_empty() -> None:
    draft = await compose(subject(persona=None, skills=(), summary=None), [], default_builders())
    assert [layer.label for layer in draft.system] == [
        "Identity",
        "Tools",
        "System prompt",
        "Run contract",
        "Wake context",
        "Conversation",
    ]


@pytest.mark.parametrize(
    ("offered", "absent"),
    [
        ((), (SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE, REQUEST_HUMAN_HANDOFF, CONVERSATION_HISTORY)),
        ((SEARCH_CONTACTS,), (SEND_WHATSAPP_MESSAGE, REQUEST_HUMAN_HANDOFF, CONVERSATION_HISTORY)),
        ((REQUEST_HUMAN_HANDOFF, CONVERSATION_HISTORY), (SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE)),
    ],
)
async def test_a_prompt_never_names_a_tool_the_run_lacks(offered: tuple[str, ...], absent: tuple[str, ...]) -> None:
    # The version's own text names every tool; only the offered ones survive composition.
    prompt = "Use crm_search_contacts, then crm_send_whatsapp_message; finish with finish. Hand off if needed."
    run = subject(history(*[("inbound", f"m{i}") for i in range(30)]), system_prompt=prompt)
    draft = await compose(run, [spec(n) for n in offered], default_builders())
    rendered = "\n".join(layer.text for layer in draft.system)
    for name in absent:
        assert name not in rendered.replace(UNAVAILABLE_TOOL, ""), name
    for name in offered:
        assert name in rendered
    if REQUEST_HUMAN_HANDOFF in offered:
        assert f"call {REQUEST_HUMAN_HANDOFF}" in rendered
    conversation = next(layer.text for layer in draft.system if layer.label == "Conversation")
    if CONVERSATION_HISTORY in offered:
        assert f"fetch them with {CONVERSATION_HISTORY}" in conversation
    else:
        assert "cannot be fetched" in conversation


def test_history_window_message_token_and_literal_bounds() -> None:
    items = history(*[("inbound", f"{i:03d}") for i in range(100)], chars=1_000)
    by_messages = history_window(items, messages=10, tokens=10**6)
    assert [i.text[:3] for i in by_messages.kept] == [f"{i:03d}" for i in range(90, 100)]
    assert by_messages.older_exist
    by_tokens = history_window(items, messages=100, tokens=1_100)  # ~335 tokens per 1,003-char message
    assert len(by_tokens.kept) == 3
    literal = history_window(items, messages=500, tokens=10**6)
    assert sum(len(i.text) for i in literal.kept) <= LITERAL_HISTORY_WINDOW_CHARS
    assert len(literal.kept) == LITERAL_HISTORY_WINDOW_CHARS // 1_003 and literal.older_exist
    assert literal.kept[-1].text.startswith("099")  # always the most recent tail, in order
    everything = history_window(items[:5], messages=10, tokens=10**6)
    assert len(everything.kept) == 5 and not everything.older_exist


async def test_transcript_alternates_and_ends_with_the_new_message() -> None:
    run = subject(history(("outbound", "welcome"), ("inbound", "a"), ("inbound", "b"), ("outbound", "c")))
    draft = await compose(run, [], default_builders())
    assert [type(m).__name__ for m in draft.messages] == ["UserMessage", "AssistantMessage", "UserMessage"]
    assert isinstance(draft.messages[0], UserMessage) and draft.messages[0].text == "a\nb"
    assert isinstance(draft.messages[1], AssistantMessage) and draft.messages[1].text == "c"
    assert isinstance(draft.messages[-1], UserMessage) and draft.messages[-1].text == "new"


async def test_the_answered_messages_are_not_repeated_as_history() -> None:
    run = subject(history(("inbound", "old")))
    answered = run.request.messages[0]
    item = HistoryItem(answered.message_id, "inbound", "new", datetime.now(UTC))
    run = dataclasses.replace(run, recent_messages=(item, *run.recent_messages))
    draft = await compose(run, [], default_builders())
    assert isinstance(draft.messages[0], UserMessage) and draft.messages[0].text == "old\nnew"


async def test_what_the_thread_summary_covers_is_not_repeated_as_history() -> None:
    """``/compact`` folds every message into the summary, the recent window too: the next prompt
    says them once (the Memory layer), not a second time verbatim."""
    items = history(("inbound", "price?"), ("outbound", "R$ 10"), ("inbound", "and red?"))  # newest first
    covered = items[1]  # the summary reaches "R$ 10"
    run = subject(items)
    assert run.conversation is not None
    through = (covered.occurred_at, covered.message_id)
    compacted = dataclasses.replace(run, conversation=dataclasses.replace(run.conversation, summary_through=through))
    draft = await compose(compacted, [spec(CONVERSATION_HISTORY)], default_builders())
    assert [m.text for m in draft.messages] == ["and red?\nnew"]
    text = {layer.label: layer.text for layer in draft.system}
    assert "Asked about prices" in text["Memory"]
    assert "latest 1 earlier message(s)" in text["Conversation"] and "fetch them" in text["Conversation"]
    # A cleared summary (no text) leaves out nothing, whatever coverage was recorded.
    cleared = dataclasses.replace(compacted, conversation=dataclasses.replace(compacted.conversation, summary=None))
    assert len((await compose(cleared, [], default_builders())).messages) == 3


async def test_prompt_record_is_what_the_model_starts_from() -> None:
    draft = await compose(subject(history(("inbound", "a"))), [spec(SEARCH_CONTACTS)], default_builders())
    record = prompt_record(draft.system, draft.messages, draft.tools)
    assert [layer["label"] for layer in record["layers"]] == LABELS
    assert record["messages"] == [{"role": "user", "text": "a\nnew"}]
    assert record["tools"] == [SEARCH_CONTACTS]
