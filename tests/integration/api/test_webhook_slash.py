"""``/todo`` at webhook ingest (issue 6 item 4): a to-do item, never a message, never a dispatch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from services.api.settings import ApiSettings
from switchboard.contracts import Topics
from switchboard.db.models import Conversation, Message
from switchboard.db.models.brief import WorkspaceTodo
from switchboard.db.session import create_engine, tenant_transaction
from tests.integration.api.test_webhook import Channel, connect_channel, deliver, encode, message_event
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

CHAT = "5511977776666@c.us"


@pytest.fixture
def api_settings(api_settings: ApiSettings) -> ApiSettings:
    """No outbox relay: the test reads the outbox rows (dispatches) itself."""
    return api_settings.model_copy(update={"outbox_relay": False})


@pytest.fixture
def engine(api_settings: ApiSettings) -> Iterator[Engine]:
    engine = create_engine(api_settings.database.url.get_secret_value(), pool_size=1)
    yield engine
    engine.dispose()


def state(engine: Engine, channel: Channel) -> dict[str, Any]:
    """Messages, dispatches and to-do items of the channel's org, as the application role sees them."""
    org_id = channel.org.org_id
    with Session(engine) as session, tenant_transaction(session, org_id):
        conversation = session.scalar(
            select(Conversation.id).where(Conversation.channel_session_id == channel.id, Conversation.chat_id == CHAT)
        )
        bodies = list(session.scalars(select(Message.body).where(Message.channel_session_id == channel.id)))
        dispatches = session.scalar(
            text("SELECT count(*) FROM outbox WHERE topic = :t AND key = :k"),
            {"t": Topics.DISPATCH_REQUESTED.name, "k": str(conversation).encode()},
        )
        todos = [
            (t.text, t.source, t.conversation_id, t.status)
            for t in session.scalars(select(WorkspaceTodo).where(WorkspaceTodo.org_id == org_id))
        ]
    return {"conversation": conversation, "bodies": bodies, "dispatches": dispatches, "todos": todos}


async def test_the_owners_todo_adds_an_item_and_is_neither_stored_nor_dispatched(
    client: httpx.AsyncClient, org: OrgHandle, engine: Engine
) -> None:
    channel = await connect_channel(client, org)
    hello = await deliver(client, encode(message_event(channel, chat=CHAT, body="Oi!")), channel.secret)
    assert hello.json()["data"]["dispatched"] is True

    todo = encode(message_event(channel, chat=CHAT, body="/todo  ligar para a Ana amanhã", from_me=True))
    first = await deliver(client, todo, channel.secret)
    again = await deliver(client, todo, channel.secret)  # WAHA redelivers

    assert first.status_code == 200, first.text
    assert first.json()["data"] == {
        "message_id": None,
        "dispatched": False,
        "duplicate": False,
        "reason": "slash_todo",
    }
    assert again.json()["data"]["duplicate"] is True and again.json()["data"]["reason"] == "slash_todo"
    seen = state(engine, channel)
    assert seen["bodies"] == ["Oi!"] and seen["dispatches"] == 1  # the command: no message, no dispatch
    assert seen["todos"] == [("ligar para a Ana amanhã", "slash_command", seen["conversation"], "open")]


async def test_a_customers_todo_reaches_the_owners_list_and_is_answered_like_any_message(
    client: httpx.AsyncClient, org: OrgHandle, engine: Engine
) -> None:
    """The customer's request lands on the owner's to-do list (with its conversation), and the
    message is stored and dispatched too: the chat shows it and the agent answers it."""
    channel = await connect_channel(client, org)
    todo = encode(message_event(channel, chat=CHAT, body="/todo me liguem amanhã"))  # their first message
    first = await deliver(client, todo, channel.secret)
    again = await deliver(client, todo, channel.secret)  # WAHA redelivers: one item, one message
    assert first.json()["data"]["dispatched"] is True, first.text
    assert again.json()["data"]["duplicate"] is True
    seen = state(engine, channel)
    assert seen["bodies"] == ["/todo me liguem amanhã"] and seen["dispatches"] == 1
    assert seen["conversation"] is not None
    assert seen["todos"] == [("me liguem amanhã", "slash_command", seen["conversation"], "open")]


@pytest.mark.parametrize("body", ["/todo", "/goal grow sales --budget abc", "/unknown thing", "/plan the week"])
async def test_malformed_other_and_unknown_commands_are_ingested_as_messages(
    client: httpx.AsyncClient, org: OrgHandle, engine: Engine, body: str
) -> None:
    # A malformed command is answered by the run (services/runner/commands.py), so it must get there.
    channel = await connect_channel(client, org)
    answer = await deliver(client, encode(message_event(channel, chat=CHAT, body=body)), channel.secret)
    assert answer.json()["data"]["dispatched"] is True
    assert uuid.UUID(answer.json()["data"]["message_id"])
    seen = state(engine, channel)
    assert seen["bodies"] == [body] and seen["todos"] == []
