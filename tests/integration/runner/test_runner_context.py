"""Layered prompt end to end (issue 6 item 1): the 50,000-character window holds over a long history,
older messages come back through the history tool, the prompt is stored with the run, and a tool the
run lacks is never named to the provider."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from services.runner.context import LITERAL_HISTORY_WINDOW_CHARS
from services.runner.providers.demo import SUMMARY_TASK
from switchboard.contracts.enums import MessageContentType
from switchboard.db.models import Message
from switchboard.db.session import tenant_transaction
from switchboard.tool_catalog import CONVERSATION_HISTORY, SEND_WHATSAPP_MESSAGE
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_request
from tests.support.fake_llm import Received, Reply, tool

pytestmark = pytest.mark.integration

MESSAGES = 120
CURSOR = re.compile(r'next_before\\": \\"([^"\\]+)\\"')
FILLER = "lorem ipsum " * 83  # ~1,000 characters per message: 120 of them are far beyond 50,000


def _long_history(rh: RunnerHarness, agent: Agent) -> None:
    start = datetime.now(UTC) - timedelta(hours=2)
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            text(
                "UPDATE ai_agent_versions SET history_message_window = 200, history_token_window = 1000000"
                " WHERE id = :v"
            ),
            {"v": agent.version_id},
        )
        session.add_all(
            Message(
                org_id=agent.org_id,
                conversation_id=agent.conversation_id,
                channel_session_id=agent.channel_session_id,
                direction="inbound" if i % 2 == 0 else "outbound",
                sender="contact" if i % 2 == 0 else "agent",
                external_id=f"wamid.{uuid.uuid4().hex}",
                body=f"marker-{i:03d} {FILLER}",
                occurred_at=start + timedelta(seconds=i),
            )
            for i in range(MESSAGES)
        )


async def test_long_history_window_holds_and_the_history_tool_returns_older_messages(rh: RunnerHarness) -> None:
    agent = create_agent(
        rh.db,
        tool_ids=[CONVERSATION_HISTORY],
        system_prompt=f"Answer briefly. Never use {SEND_WHATSAPP_MESSAGE}.",
    )
    _long_history(rh, agent)
    message = inbound(rh.db, agent, "What did I ask you at the very beginning?")

    pages = iter(range(4))

    def script(received: Received) -> Reply:
        """Page back through the history tool with its cursor, four pages of 15, then answer."""
        if next(pages, None) is None:
            return Reply(text="You asked about marker-061.")
        cursors = CURSOR.findall(json.dumps(received.body))
        return tool(CONVERSATION_HISTORY, {"limit": 15, **({"before": cursors[-1]} if cursors else {})})

    rh.fake.script(script)
    before = len(rh.fake.received)
    request = run_request(agent, [message])
    row = await rh.run(request)
    assert row.status == "completed", (row.error_code, row.error_message)

    # The run's own model calls (they offer its tools; a background summary job may call the model too).
    bodies = [
        json.dumps(r.body) for r in rh.fake.received[before:] if CONVERSATION_HISTORY in json.dumps(r.body.get("tools"))
    ]
    first, last = bodies[0], bodies[-1]
    assert len(bodies) == 5
    # The window: the newest messages up to 50,000 characters, nothing older.
    assert row.prompt is not None
    history_chars = sum(len(m["text"]) for m in row.prompt["messages"]) - len(message.text)
    # (minus at most one message more: a transcript never starts with the agent's turn)
    assert LITERAL_HISTORY_WINDOW_CHARS - 2_100 < history_chars <= LITERAL_HISTORY_WINDOW_CHARS + MESSAGES
    assert "marker-119" in first and "marker-030" not in first
    kept = [i for i in range(MESSAGES) if f"marker-{i:03d}" in first]
    assert kept == list(range(kept[0], MESSAGES)) and len(kept) < MESSAGES // 2
    # ... and the model is told where the rest is; the older messages come back through the tool.
    layers = {layer["label"]: layer["text"] for layer in row.prompt["layers"]}
    assert f"fetch them with {CONVERSATION_HISTORY}" in layers["Conversation"]
    assert "marker-061" in last and f"marker-{kept[0] - 1:03d}" in last
    assert [e["tool_name"] for e in row.tool_calls if e["kind"] == "tool"] == [CONVERSATION_HISTORY] * 4

    # Layers in their fixed order, stored with the run; a tool not granted is named nowhere.
    assert list(layers) == ["Identity", "Tools", "System prompt", "Run contract", "Wake context", "Conversation", "Now"]
    assert row.prompt["tools"] == [CONVERSATION_HISTORY]
    for body in bodies:
        assert SEND_WHATSAPP_MESSAGE not in body


async def test_an_attachment_reaches_the_model_as_a_note_of_what_was_sent(rh: RunnerHarness) -> None:
    """A photo without a caption used to be an empty message: the model was told nothing new had come.
    Now the new message and the history say what was attached, with the caption when there is one."""
    agent = create_agent(rh.db)
    inbound(rh.db, agent, "", content_type=MessageContentType.AUDIO)  # an earlier voice note, no text
    inbound(rh.db, agent, "Av. Paulista 1000 (-23.56, -46.65)", content_type=MessageContentType.LOCATION)
    photo = inbound(rh.db, agent, "", content_type=MessageContentType.IMAGE)
    invoice = inbound(rh.db, agent, "my invoice", content_type=MessageContentType.DOCUMENT)
    rh.fake.script([Reply(text="Thanks, I cannot open attachments; could you describe it?")])
    before = len(rh.fake.received)

    row = await rh.run(run_request(agent, [photo, invoice]))

    assert row.status == "completed", (row.error_code, row.error_message)
    # The run's own call (a background summary job of the module's other runs may call the model too).
    sent, *_ = [json.dumps(r.body) for r in rh.fake.received[before:] if SUMMARY_TASK not in json.dumps(r.body)]
    assert "[sent an image; its content is not available to you]" in sent
    assert "[sent a document; its content is not available to you] my invoice" in sent
    assert "[sent an audio message; its content is not available to you]" in sent  # the history
    assert "[shared a location: Av. Paulista 1000 (-23.56, -46.65)]" in sent
    assert "No new customer message" not in sent


async def test_the_agent_is_told_the_time_in_the_businesss_time_zone(rh: RunnerHarness) -> None:
    """ "Remind me tomorrow at 9": the model must know today's date and the hour where the business
    is — it guessed both (follow-ups were scheduled hours off, times told to customers were UTC)."""
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5")
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            text("UPDATE organizations SET time_zone = 'America/Sao_Paulo' WHERE id = :org"), {"org": agent.org_id}
        )
    rh.fake.script([Reply(text="Combinado!")])
    before = datetime.now(UTC)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Me lembra amanhã às 9?")]))
    assert row.prompt is not None
    labels = [layer["label"] for layer in row.prompt["layers"]]
    now = {layer["label"]: layer["text"] for layer in row.prompt["layers"]}["Now"]
    assert labels[-1] == "Now", "the last layer: after the ones a prompt cache keeps"
    assert "(America/Sao_Paulo, UTC-03:00)" in now
    local = re.match(r"\w+, (\d{4}-\d{2}-\d{2} \d{2}:\d{2}) ", now)
    assert local is not None, now
    told = datetime.strptime(local.group(1), "%Y-%m-%d %H:%M").replace(tzinfo=UTC) + timedelta(hours=3)
    assert abs(told - before) < timedelta(minutes=2), "the business's local time, not UTC"
    # And the model saw it (the system prompt it was sent).
    assert "America/Sao_Paulo" in json.dumps(rh.fake.calls_to("anthropic")[-1].body)
