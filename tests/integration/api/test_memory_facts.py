"""``/api/v1/memory/facts`` (services/api/memory/): people see what the agents remember, teach the
business's facts once, and forget a wrong one — and the agents' reader (the runner's
``FactRetriever``) finds what was taught and stops finding what was forgotten."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import select

from services.runner.memory import FactRetriever
from switchboard.db.enums import Role
from switchboard.db.models import Contact
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.memory import ConversationStateNote, ConversationSummary
from switchboard.db.session import create_async_engine, create_async_sessionmaker
from tests.integration.db.factories import create_conversation
from tests.support.agents import tenant_session
from tests.support.api import OrgHandle
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

PATH = "/api/v1/memory/facts"


def _contact(org: OrgHandle) -> uuid.UUID:
    with tenant_session(org) as s:
        contact = Contact(org_id=org.org_id, external_id=f"55{uuid.uuid4().int % 10**11}@c.us", display_name="Ana")
        s.add(contact)
        s.flush()
        return contact.id


async def test_teach_list_and_forget_facts_and_the_agents_read_what_is_there(
    client: httpx.AsyncClient, org: OrgHandle, stack: StackEndpoints
) -> None:
    ana = _contact(org)
    manager = org.headers(Role.MANAGER)
    closed = await client.post(PATH, json={"fact": "We  close on   Sundays"}, headers=manager)
    assert closed.status_code == 201, closed.text
    assert (closed.json()["data"]["scope"], closed.json()["data"]["source"]) == ("org", "api")
    assert closed.json()["data"]["fact"] == "We close on Sundays"
    sofa = await client.post(
        PATH, json={"fact": "Wants the blue sofa delivered", "contact_id": str(ana)}, headers=manager
    )
    assert sofa.status_code == 201 and sofa.json()["data"]["contact_id"] == str(ana)
    again = await client.post(PATH, json={"fact": "we close on sundays"}, headers=manager)
    assert again.json()["data"]["id"] == closed.json()["data"]["id"], "the same fact is one entry"

    for bad in ({"fact": "   "}, {"fact": "x" * 501}, {"fact": "ok", "extra": 1}):
        assert (await client.post(PATH, json=bad, headers=manager)).status_code == 422, bad
    stranger = await client.post(PATH, json={"fact": "x", "contact_id": str(uuid.uuid4())}, headers=manager)
    assert stranger.status_code == 404
    assert (await client.get(PATH, headers=org.headers(Role.VIEWER))).status_code == 403

    everything = (await client.get(PATH, headers=manager)).json()["data"]
    assert [f["fact"] for f in everything] == ["We close on Sundays", "Wants the blue sofa delivered"]
    of_ana = (await client.get(PATH, params={"contact_id": str(ana)}, headers=manager)).json()["data"]
    assert [f["fact"] for f in of_ana] == ["Wants the blue sofa delivered"]
    of_org = (await client.get(PATH, params={"scope": "org"}, headers=manager)).json()["data"]
    assert [f["fact"] for f in of_org] == ["We close on Sundays"]
    first = await client.get(PATH, params={"limit": 1}, headers=manager)
    rest = await client.get(PATH, params={"limit": 1, "cursor": first.json()["next_cursor"]}, headers=manager)
    assert [f["id"] for f in first.json()["data"] + rest.json()["data"]] == [f["id"] for f in everything]

    engine = create_async_engine(stack.database_url)
    try:
        retriever = FactRetriever(create_async_sessionmaker(engine))
        found = await retriever.relevant(org.org_id, ana, "Is the sofa delivered on Sunday?")
        assert {f.fact for f in found} == {"We close on Sundays", "Wants the blue sofa delivered"}

        forgotten = await client.delete(f"{PATH}/{sofa.json()['data']['id']}", headers=manager)
        assert forgotten.status_code == 204
        assert (await client.delete(f"{PATH}/{sofa.json()['data']['id']}", headers=manager)).status_code == 404
        found = await retriever.relevant(org.org_id, ana, "Is the sofa delivered on Sunday?")
        assert [f.fact for f in found] == ["We close on Sundays"], "a forgotten fact is read by no later run"
    finally:
        await engine.dispose()

    with tenant_session(org) as s:
        actions = [a for a in s.scalars(select(AuditLogEntry).where(AuditLogEntry.target_type == "memory_fact"))]
    assert sorted(a.action for a in actions) == [
        "memory_fact.deleted",
        "memory_fact.saved",
        "memory_fact.saved",
        "memory_fact.saved",
    ]
    assert not any("sofa" in str(a.details) or "Sundays" in str(a.details) for a in actions), "never the text"


async def test_a_conversations_summary_and_state_note_are_shown(client: httpx.AsyncClient, org: OrgHandle) -> None:
    with tenant_session(org) as s:
        empty, summarized = (create_conversation(s, org.org_id) for _ in range(2))
        s.add_all(
            [
                ConversationSummary(
                    org_id=org.org_id,
                    conversation_id=summarized.id,
                    summary="Asked twice for the price list; prefers Saturday deliveries.",
                    through_occurred_at=datetime.now(UTC),
                    through_message_id=uuid.uuid4(),
                    messages_covered=42,
                    provider="anthropic",
                    model="claude-haiku-4-5",
                ),
                ConversationStateNote(
                    org_id=org.org_id, conversation_id=summarized.id, note="Quote sent; awaiting OK."
                ),
            ]
        )
    manager = org.headers(Role.MANAGER)
    shown = await client.get(f"/api/v1/conversations/{summarized.id}/memory", headers=manager)
    assert shown.status_code == 200, shown.text
    data = shown.json()["data"]
    assert data["summary"]["summary"].startswith("Asked twice") and data["summary"]["messages_covered"] == 42
    assert data["state_note"]["note"] == "Quote sent; awaiting OK."
    nothing = (await client.get(f"/api/v1/conversations/{empty.id}/memory", headers=manager)).json()["data"]
    assert (nothing["summary"], nothing["state_note"]) == (None, None)
    assert (await client.get(f"/api/v1/conversations/{uuid.uuid4()}/memory", headers=manager)).status_code == 404
    assert (
        await client.get(f"/api/v1/conversations/{empty.id}/memory", headers=org.headers(Role.VIEWER))
    ).status_code == 403


async def test_a_wrong_summary_or_state_note_is_cleared_by_a_manager(client: httpx.AsyncClient, org: OrgHandle) -> None:
    wrong = "Wants beer, not wine; lives at Rua Augusta 12."
    with tenant_session(org) as s:
        conversation = create_conversation(s, org.org_id)
        conversation.summary = wrong
        s.add_all(
            [
                ConversationSummary(
                    org_id=org.org_id,
                    conversation_id=conversation.id,
                    summary=wrong,
                    through_occurred_at=datetime.now(UTC),
                    through_message_id=uuid.uuid4(),
                    messages_covered=12,
                    provider="anthropic",
                    model="claude-haiku-4-5",
                ),
                ConversationStateNote(org_id=org.org_id, conversation_id=conversation.id, note="Beer order confirmed."),
            ]
        )
    memory = f"/api/v1/conversations/{conversation.id}/memory"
    manager, viewer = org.headers(Role.MANAGER), org.headers(Role.VIEWER)

    assert (await client.delete(f"{memory}/summary", headers=viewer)).status_code == 403
    unknown = await client.delete(f"{memory}/everything", headers=manager)
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "validation_error"
    elsewhere = f"/api/v1/conversations/{uuid.uuid4()}/memory/summary"
    assert (await client.delete(elsewhere, headers=manager)).status_code == 404
    cleared = await client.delete(f"{memory}/summary", headers=manager)
    assert cleared.status_code == 204, cleared.text
    shown = (await client.get(memory, headers=manager)).json()["data"]
    assert shown["summary"] is None and shown["state_note"]["note"] == "Beer order confirmed.", "only the summary"
    assert (await client.delete(f"{memory}/state-note", headers=manager)).status_code == 204
    assert (await client.get(memory, headers=manager)).json()["data"]["state_note"] is None
    # Clearing what is already gone changes nothing and records nothing.
    assert (await client.delete(f"{memory}/summary", headers=manager)).status_code == 204
    assert (await client.delete(f"{memory}/state-note", headers=manager)).status_code == 204

    with tenant_session(org) as s:
        assert s.get_one(type(conversation), conversation.id).summary is None, "the prompt's copy is gone too"
        audit = list(s.scalars(select(AuditLogEntry).where(AuditLogEntry.target_id == str(conversation.id))))
    assert sorted(a.action for a in audit) == ["conversation_state_note.cleared", "conversation_summary.cleared"]
    assert next(a for a in audit if a.action == "conversation_summary.cleared").details["messages_covered"] == 12
    assert not any("Augusta" in str(a.details) or "Beer" in str(a.details) for a in audit), "never the text"
