"""Conversation memory end to end (issue 6 item 2): the thread summary is made in the background after the
reply's run completed, never delaying it, sealed like every provider request; the demo model writes a
deterministic labeled summary; long-term facts are saved by the ``memory_save_fact`` tool and retrieved by
relevance (PostgreSQL full-text search) into the prompt."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from services.runner.memory import LABEL as FACTS_LABEL
from services.runner.providers.demo import SUMMARY_LABEL
from switchboard.contracts import RunCompleted
from switchboard.db.models import AiAgentVersion, Contact, Conversation, Message
from switchboard.db.models.memory import ConversationSummary, MemoryFact
from switchboard.db.session import tenant_transaction
from switchboard.tool_catalog import MEMORY_SAVE_FACT
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_request
from tests.support.fake_llm import Received, Reply, tool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

PHONE = "+55 11 98765-4321"


def window(rh: RunnerHarness, agent: Agent, messages: int) -> None:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            update(AiAgentVersion).where(AiAgentVersion.id == agent.version_id).values(history_message_window=messages)
        )


def past_messages(rh: RunnerHarness, agent: Agent, texts: list[str]) -> list[uuid.UUID]:
    """Alternating customer / agent messages, oldest first, all before now."""
    start = datetime.now(UTC) - timedelta(hours=1)
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        rows = [
            Message(
                org_id=agent.org_id,
                conversation_id=agent.conversation_id,
                channel_session_id=agent.channel_session_id,
                direction="inbound" if i % 2 == 0 else "outbound",
                sender="contact" if i % 2 == 0 else "agent",
                external_id=f"wamid.{uuid.uuid4().hex}",
                body=body,
                occurred_at=start + timedelta(minutes=i),
            )
            for i, body in enumerate(texts)
        ]
        session.add_all(rows)
        session.flush()
        return [r.id for r in rows]


async def summary_of(rh: RunnerHarness, agent: Agent, *, revision: int = 1) -> ConversationSummary:
    deadline = time.monotonic() + 15
    while True:
        with Session(rh.db, expire_on_commit=False) as session, tenant_transaction(session, agent.org_id):
            row = session.get(ConversationSummary, agent.conversation_id)
        if row is not None and row.revision >= revision:
            return row
        assert time.monotonic() < deadline, "no thread summary was made"
        await asyncio.sleep(0.05)


def is_summary(received: Received) -> bool:
    return "Summarization task" in json.dumps(received.body.get("system"))


async def run_while_a_summary_waits(rh: RunnerHarness, agent: Agent, summary: str) -> tuple[Any, Received]:
    """Run a reply whose summary job's model answers ``summary`` a second late; return the run and the
    summary request once the job is waiting on it (what a test does meanwhile races the job)."""

    def script(received: Received) -> Reply:
        if is_summary(received):
            return Reply(text=summary, input_tokens=300, output_tokens=9, delay_s=1.0)
        return Reply(text="Certo!", input_tokens=10, output_tokens=5)

    rh.fake.script(script)
    seen = len(rh.fake.received)
    run = await rh.run(run_request(agent, [inbound(rh.db, agent, "Pode mandar?")]))
    deadline = time.monotonic() + 10
    while not any(is_summary(r) for r in rh.fake.received[seen:]):
        assert time.monotonic() < deadline, "no summary job started"
        await asyncio.sleep(0.02)
    return run, next(r for r in rh.fake.received[seen:] if is_summary(r))


async def test_a_long_conversation_gets_a_summary_after_the_reply_without_delaying_it(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, contact_name="Ana Souza")
    window(rh, agent, 4)
    older = past_messages(
        rh,
        agent,
        [
            "Oi, sou a Ana Souza",
            "Olá! Como posso ajudar?",
            f"Meu telefone é {PHONE}",
            "Anotado.",
            "Quero 3 caixas de vinho",
            "Perfeito, 3 caixas.",
            "A entrega pode ser sábado?",
            "Sim, sábado de manhã.",
        ],
    )
    message = inbound(rh.db, agent, "Pode confirmar a entrega?")

    def script(received: Received) -> Reply:
        if is_summary(received):  # slow on purpose: the reply must not wait for it
            return Reply(text="<contact_1> ordered 3 boxes of wine for Saturday.", delay_s=1.0)
        return Reply(text="Confirmado para sábado!")

    rh.fake.script(script)
    seen = len(rh.fake.received)
    run = await rh.run(run_request(agent, [message]))
    assert run.status == "completed" and run.completed_at is not None
    summary = await summary_of(rh, agent)
    assert run.completed_at < summary.created_at, "the reply's run completed before the summary job wrote"
    assert [is_summary(r) for r in rh.fake.received[seen:]] == [False, True], "reply first, then one summary"

    # Window 4 keeps the newest 4 (3 older + the new one); the 5 before them are folded into the summary.
    assert summary.messages_covered == 5 and summary.through_message_id == older[4]
    assert summary.source_run_id == run.id and summary.revision == 1
    assert (summary.tokens_in, summary.tokens_out) == (100, 20)
    assert summary.summary == "Ana Souza ordered 3 boxes of wine for Saturday.", "aliases revealed before storing"
    request = json.dumps(rh.fake.received[seen + 1].body)
    assert "Ana" not in request and "98765" not in request, "the summary request is pseudonymized"
    assert "Quero 3 caixas de vinho" in request and "Sim, sábado de manhã." not in request

    # The next run sees it in its Memory layer (pseudonymized again).
    rh.fake.script([Reply(text="De nada!")])
    later = await rh.run(run_request(agent, [inbound(rh.db, agent, "Obrigada")]))
    assert later.prompt is not None
    memory = {layer["label"]: layer["text"] for layer in later.prompt["layers"]}["Memory"]
    assert memory.endswith("<contact_1> ordered 3 boxes of wine for Saturday.")


async def test_the_demo_model_writes_a_deterministic_labeled_summary(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="demo", model="demo-1", api_key=None)
    window(rh, agent, 2)
    past_messages(rh, agent, ["Quanto custa o vinho?", "R$ 50.", "E o frete?", "Grátis."])
    run = await rh.run(run_request(agent, [inbound(rh.db, agent, "Ok, obrigado")]))
    assert run.status == "completed"
    summary = await summary_of(rh, agent)
    assert summary.summary == (
        f"{SUMMARY_LABEL} 3 earlier message(s) summarized: 2 from the customer, 1 from the agent. "
        'The customer\'s latest lines: "Quanto custa o vinho?"; "E o frete?".'
    )
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get_one(Conversation, agent.conversation_id).summary == summary.summary


async def test_a_summary_call_that_writes_nothing_is_still_counted(rh: RunnerHarness) -> None:
    """The provider billed the summary call even when the model wrote nothing to store: its tokens
    reach the org's usage (outside any agent's budget) — before, they were dropped."""
    agent = create_agent(rh.db)
    window(rh, agent, 2)
    past_messages(rh, agent, ["Oi", "Olá!", "Quero vinho", "Qual?", "Tinto", "Anotado."])

    def script(received: Received) -> Reply:
        if is_summary(received):
            return Reply(text="  ", input_tokens=700, output_tokens=1)
        return Reply(text="Certo!", input_tokens=10, output_tokens=5)

    rh.fake.script(script)
    seen = len(rh.fake.received)
    run = await rh.run(run_request(agent, [inbound(rh.db, agent, "Pode mandar?")]))
    await rh.runner.summarizer.wait_idle()  # type: ignore[union-attr]
    assert [is_summary(r) for r in rh.fake.received[seen:]] == [False, True]
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get(ConversationSummary, agent.conversation_id) is None, "nothing to store"
    usage = rh.usage(agent.org_id)
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (run.tokens_in + 700, run.tokens_out + 1)


async def test_a_conversation_within_its_window_gets_no_summary(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="demo", model="demo-1", api_key=None)
    past_messages(rh, agent, ["Oi", "Olá!"])
    await rh.run(run_request(agent, [inbound(rh.db, agent, "Tudo bem?")]))
    await rh.runner.summarizer.wait_idle()  # type: ignore[union-attr]
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get(ConversationSummary, agent.conversation_id) is None


def facts_layer(prompt: dict[str, object] | None) -> str | None:
    assert prompt is not None
    return {layer["label"]: layer["text"] for layer in prompt["layers"]}.get(FACTS_LABEL)  # type: ignore[attr-defined]


async def test_facts_saved_by_the_tool_are_retrieved_by_relevance(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[MEMORY_SAVE_FACT])
    rh.fake.script(
        [
            tool(MEMORY_SAVE_FACT, {"fact": "Prefers  deliveries on Saturday mornings"}),
            tool(MEMORY_SAVE_FACT, {"fact": "prefers deliveries on saturday mornings", "scope": "contact"}),
            tool(MEMORY_SAVE_FACT, {"fact": "Is allergic to peanuts"}),
            Reply(text="Noted!"),
        ]
    )
    saved = await rh.run(run_request(agent, [inbound(rh.db, agent, "I like Saturday mornings, no peanuts")]))
    assert saved.status == "completed"
    # Saving facts is the agent's bookkeeping, not a business action the Home reports as done.
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.actions_executed == ()
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        rows = session.scalars(select(MemoryFact).where(MemoryFact.org_id == agent.org_id)).all()
        assert sorted((r.fact, r.scope, r.contact_id, r.source, r.source_run_id) for r in rows) == [
            ("Is allergic to peanuts", "contact", agent.contact_id, "tool", saved.id),
            ("Prefers deliveries on Saturday mornings", "contact", agent.contact_id, "tool", saved.id),
        ], "one row per fact: the same text saved twice is deduplicated"
        # An org-wide fact, another contact's fact and an unrelated org fact.
        other = Contact(org_id=agent.org_id, external_id=f"55{uuid.uuid4().int % 10**11:011d}@c.us")
        session.add(other)
        session.flush()
        session.add_all(
            [
                MemoryFact(
                    org_id=agent.org_id,
                    scope="org",
                    fact="Deliveries are free above 100 euros",
                    fact_key="k1",
                    source="api",
                ),
                MemoryFact(
                    org_id=agent.org_id,
                    scope="contact",
                    contact_id=other.id,
                    fact="Wants deliveries on Sunday",
                    fact_key="k2",
                    source="api",
                ),
                MemoryFact(org_id=agent.org_id, scope="org", fact="The shop sells wine", fact_key="k3", source="api"),
            ]
        )
        index = session.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memory_facts_search'")
        ).scalar_one()
    assert "USING gin (search)" in index

    rh.fake.script([Reply(text="Saturday it is.")])
    run = await rh.run(run_request(agent, [inbound(rh.db, agent, "When is my next delivery?")]))
    layer = facts_layer(run.prompt)
    assert layer is not None
    assert set(layer.splitlines()[1:]) == {
        "- (this customer) Prefers deliveries on Saturday mornings",
        "- (the business) Deliveries are free above 100 euros",
    }
    assert "peanuts" not in layer and "Sunday" not in layer and "wine" not in layer
    assert "Saturday mornings" in json.dumps(rh.fake.received[-1].body["system"]), "the model saw it"

    rh.fake.script([Reply(text="Nothing about that.")])
    unrelated = await rh.run(run_request(agent, [inbound(rh.db, agent, "Qual é o horário?")]))
    assert facts_layer(unrelated.prompt) is None


async def test_a_summary_cleared_while_a_job_extends_it_does_not_come_back(rh: RunnerHarness) -> None:
    """A person clears a wrong summary while a summary job is extending it: the job's text is built on
    the cleared one, so it is not stored (the call is still counted); the next job starts afresh."""
    from services.api.memory.service import MemoryPart, clear_memory

    agent = create_agent(rh.db)
    window(rh, agent, 2)
    older = past_messages(rh, agent, ["Oi", "Olá!", "Quero vinho", "Qual?", "Tinto", "Anotado."])
    wrong = "Wants beer, not wine."
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        first_two = session.get_one(Message, older[1])
        session.add(
            ConversationSummary(
                org_id=agent.org_id,
                conversation_id=agent.conversation_id,
                summary=wrong,
                through_occurred_at=first_two.occurred_at,
                through_message_id=first_two.id,
                messages_covered=2,
                provider="anthropic",
                model="claude-haiku-4-5",
            )
        )
        session.execute(update(Conversation).where(Conversation.id == agent.conversation_id).values(summary=wrong))

    run, request = await run_while_a_summary_waits(rh, agent, "Wants beer; asked for red wine.")
    assert wrong in json.dumps(request.body), "the job extends the stored summary"
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert clear_memory(
            session, agent.org_id, agent.conversation_id, MemoryPart.SUMMARY, actor_user_id=None, request_id="test"
        )
    await rh.runner.summarizer.wait_idle()  # type: ignore[union-attr]

    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get(ConversationSummary, agent.conversation_id) is None, "the cleared text came back"
        assert session.get_one(Conversation, agent.conversation_id).summary is None
    usage = rh.usage(agent.org_id)
    assert usage is not None and usage.input_tokens == run.tokens_in + 300, "the billed call is counted"


async def test_a_summary_job_that_read_a_customer_erased_meanwhile_stores_nothing(rh: RunnerHarness) -> None:
    """The erasure removes the summary; a job that read the customer's messages before it and answers
    after it must not write their paraphrase back (docs/api.md "Erasing a contact")."""
    from services.api.contacts.erasure import erase_contact

    agent = create_agent(rh.db)
    window(rh, agent, 2)
    past_messages(rh, agent, ["Oi, sou a Ana", "Olá!", "Moro na Rua Augusta 12", "Anotado.", "Tinto", "Certo."])

    await run_while_a_summary_waits(rh, agent, "Ana lives at Rua Augusta 12.")
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        erase_contact(session, agent.org_id, agent.contact_id, actor_user_id=None, request_id="test")
    await rh.runner.summarizer.wait_idle()  # type: ignore[union-attr]

    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        assert session.get(ConversationSummary, agent.conversation_id) is None, "the erased customer came back"
        assert session.get_one(Conversation, agent.conversation_id).summary is None
