"""PII never reaches a provider (issue 6 item 5): every request body the fake provider receives is
scanned for the real emails, phone numbers and names of the contacts a run touches; the write tool,
the recorded reply and run_completed get the real values back; the trace keeps aliases."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from switchboard.contracts import RunCompleted
from switchboard.db.models import Contact, WorkspaceAutonomy
from switchboard.db.session import tenant_transaction
from switchboard.tool_catalog import CONVERSATION_HISTORY, SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE, gated_area
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_request
from tests.support.fake_llm import Received, Reply, tool

pytestmark = pytest.mark.integration

ALIAS = re.compile(r"<(?:email|phone|contact)_\d+>")

# The conversation's contact, and another contact only a tool returns (ASCII: bodies are JSON-escaped).
GIULIA = {"name": "Giulia Bianchi", "email": "giulia.bianchi@example.it", "phone": "+393471234567"}
MARCO = {"name": "Marco Verdi", "email": "marco.verdi@example.org", "phone": "+393389876543"}
RAW_VALUES = (
    "Giulia",
    "Bianchi",
    GIULIA["email"],
    "393471234567",
    "347 123 4567",
    "3471234567",
    "Marco",
    "Verdi",
    MARCO["email"],
    "393389876543",
    "338 987 6543",
)


def _contacts(rh: RunnerHarness, agent: Agent) -> None:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            text("UPDATE contacts SET email = :email, phone_number = :phone WHERE id = :id"),
            {"email": GIULIA["email"], "phone": GIULIA["phone"], "id": agent.contact_id},
        )
        # The write tool must really run (autonomy ``auto`` for its area; the default ``propose`` only records it).
        session.add(WorkspaceAutonomy(org_id=agent.org_id, area=gated_area(SEND_WHATSAPP_MESSAGE), mode="auto"))
        session.add(
            Contact(
                org_id=agent.org_id,
                external_id=f"393389876543-{uuid.uuid4().hex[:6]}@c.us",
                display_name=MARCO["name"],
                phone_number=MARCO["phone"],
                email=MARCO["email"],
            )
        )


def _script() -> object:
    """Search → history → send a message quoting every alias seen → a final answer with aliases."""
    steps = iter(
        [
            tool(SEARCH_CONTACTS, {"query": "example.org"}),
            tool(CONVERSATION_HISTORY, {"limit": 10}),
        ]
    )

    def script(received: Received) -> Reply:
        step = next(steps, None)
        if step is not None:
            return step
        body = json.dumps(received.body)
        if "queued" not in body:  # the send tool has not run yet
            return tool(SEND_WHATSAPP_MESSAGE, {"text": "Riepilogo: " + " ".join(sorted(set(ALIAS.findall(body))))})
        return Reply(text="Grazie <contact_1>! Ti scrivo a <email_1>.")

    return script


@pytest.mark.parametrize(
    ("provider", "model"),
    [("anthropic", "claude-haiku-4-5"), ("openai", "gpt-5-mini"), ("google", "gemini-2.5-flash")],
)
async def test_no_raw_pii_reaches_the_provider_and_the_write_tool_gets_real_values(
    rh: RunnerHarness, provider: str, model: str
) -> None:
    agent = create_agent(
        rh.db,
        provider=provider,
        model=model,
        contact_name=GIULIA["name"],
        tool_ids=[SEARCH_CONTACTS, CONVERSATION_HISTORY, SEND_WHATSAPP_MESSAGE],
        system_prompt="You are the assistant of Studio Rossi.",
    )
    _contacts(rh, agent)
    inbound(rh.db, agent, "Buongiorno, sono Giulia Bianchi, mi richiamate al 347 123 4567?")
    inbound(rh.db, agent, "Certo Giulia, a presto.", direction="outbound")
    message = inbound(rh.db, agent, f"Scrivetemi anche a {GIULIA['email']} o al +39 347 1234567, grazie. Giulia")
    rh.fake.script(_script())  # type: ignore[arg-type]
    before = len(rh.fake.received)

    request = run_request(agent, [message])
    row = await rh.run(request)

    assert row.status == "completed", (row.error_code, row.error_message, row.summary)
    everything = [json.dumps(r.body) for r in rh.fake.received[before:]]  # background jobs (summary) included
    bodies = [b for b in everything if SEND_WHATSAPP_MESSAGE in b]
    assert len(bodies) == 4  # search, history, send, answer: every step of the run was captured
    for body in everything:
        for raw in RAW_VALUES:
            assert raw not in body, f"{raw!r} reached {provider}"
    # The tools' results really held the PII (so the scan above means something): aliases stand in.
    assert "<email_" in bodies[1] and "<contact_" in bodies[1] and "<phone_" in bodies[2]

    # The write tool acted on the real values (the MCP server stored the outbound message).
    sent = rh.scalar(
        agent.org_id,
        "SELECT body FROM messages WHERE run_id = :run AND direction = 'outbound'",
        run=request.run_id,
    )
    assert sent is not None and not ALIAS.search(sent)
    for real in (GIULIA["name"], GIULIA["email"], MARCO["name"], MARCO["email"], MARCO["phone"]):
        assert real in sent

    # The customer gets real values; the trace and the stored prompt keep aliases.
    assert row.final_text == f"Grazie {GIULIA['name']}! Ti scrivo a {GIULIA['email']}."
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.final_text == row.final_text
    stored = json.dumps([row.tool_calls, row.prompt])
    for raw in RAW_VALUES:
        assert raw not in stored, raw
    assert row.prompt is not None and "<contact_1>" in json.dumps(row.prompt)
    # Ids are never mistaken for phone numbers: the identity layer still names the real ids.
    identity = row.prompt["layers"][0]["text"]
    assert str(agent.agent_id) in identity and str(agent.org_id) in identity
