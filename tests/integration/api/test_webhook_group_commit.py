"""Webhook group commit: deliveries that arrive together share a transaction, and each still
gets the answer it would have had alone (services/api/webhooks/group_commit.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from services.api.core.database import Database
from services.api.core.errors import Unauthorized, ValidationFailed
from services.api.settings import ApiSettings
from services.api.webhooks import service
from services.api.webhooks.group_commit import WebhookGroupCommit, WriterStopped
from services.api.webhooks.schemas import WahaEvent, WebhookResult
from switchboard.contracts import Serde, Topics
from switchboard.crypto import KeyRing
from switchboard.db.models.channels import Conversation, Message
from switchboard.db.session import create_engine
from tests.integration.api.test_webhook import (
    Channel,
    connect_channel,
    deliver,
    dispatch_rows,
    encode,
    message_event,
)
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


@pytest.fixture
def api_settings(api_settings: ApiSettings) -> ApiSettings:
    return api_settings.model_copy(update={"outbox_relay": False})


@pytest.fixture
def app_session(api_settings: ApiSettings) -> Iterator[Session]:
    """One transaction as the application role (row-level security applies), committed by the test."""
    engine = create_engine(api_settings.database.url.get_secret_value(), pool_size=1)
    with Session(engine) as session:
        yield session
    engine.dispose()


def delivery(channel: Channel, event: dict[str, Any], *, secret: str | None = None) -> service.Delivery:
    raw = encode(event)
    return service.Delivery(
        raw=raw,
        event=WahaEvent.model_validate_json(raw),
        signature=service.sign(secret or channel.secret, raw),
        algorithm="sha512",
        request_id=None,
    )


def chat() -> str:
    return f"55117{uuid.uuid4().int % 10**8:08d}@c.us"


def stored(session: Session, channel: Channel, external_id: str) -> list[Message]:
    return list(
        session.scalars(
            select(Message).where(Message.channel_session_id == channel.id, Message.external_id == external_id)
        )
    )


async def test_one_batch_answers_each_delivery_as_if_it_came_alone(
    client: httpx.AsyncClient,
    make_org: Callable[..., OrgHandle],
    api_settings: ApiSettings,
    app_session: Session,
    db: Callable[[uuid.UUID], Session],
) -> None:
    """Two orgs, a refused signature, an invalid payload, an unknown session, a repeat and two
    messages of one chat, all in one transaction: each gets its own answer, each org's rows
    are its own, and the chat's dispatch records keep arrival order."""
    first, second = make_org(), make_org()
    channel_a, channel_b = await connect_channel(client, first), await connect_channel(client, second)
    busy_chat, other_chat = chat(), chat()
    earlier = message_event(channel_a, chat=busy_chat, body="primeira")
    later = message_event(channel_a, chat=busy_chat, body="segunda")
    interleaved = message_event(channel_a, chat=other_chat, body="outra conversa")
    of_second = message_event(channel_b, chat=busy_chat, body="outra loja")
    bad_signature = message_event(channel_a, chat=chat(), body="assinatura errada")
    invalid = message_event(channel_b)
    del invalid["payload"]["from"]
    unknown = {**message_event(channel_a), "session": f"nobody-{uuid.uuid4().hex[:8]}"}
    batch = [
        delivery(channel_a, earlier),
        delivery(channel_b, of_second),
        delivery(channel_a, bad_signature, secret="not-the-secret"),
        delivery(channel_a, interleaved),
        delivery(channel_b, invalid),
        delivery(channel_a, earlier),  # the same message again, in the same transaction
        delivery(channel_a, unknown),
        delivery(channel_a, later),
    ]
    # The owner's /todo (an ORM insert) in the org visited first: it must be written under that
    # org's tenant, before the batch moves on to the other org.
    early = min((channel_a, channel_b), key=lambda c: str(c.org.org_id))
    owners_todo = message_event(early, chat=chat(), body="/todo ligar para o fornecedor", from_me=True)
    batch.append(delivery(early, owners_todo))
    with app_session.begin():
        outcomes = service.handle_deliveries(
            app_session,
            keyring=KeyRing.from_settings(api_settings.runtime),
            serde=Serde.from_settings(api_settings.kafka),
            deliveries=batch,
        )

    assert len(outcomes) == len(batch)
    todo_outcome = outcomes.pop()
    assert isinstance(todo_outcome, WebhookResult) and todo_outcome.reason == "slash_todo"
    ok = [outcome for outcome in outcomes if isinstance(outcome, WebhookResult)]
    assert [type(outcome) for outcome in outcomes] == [
        WebhookResult,
        WebhookResult,
        Unauthorized,
        WebhookResult,
        ValidationFailed,
        WebhookResult,
        Unauthorized,
        WebhookResult,
    ]
    assert [(o.dispatched, o.duplicate) for o in ok] == [
        (True, False),
        (True, False),
        (True, False),
        (False, True),
        (True, False),
    ]
    assert outcomes[5].message_id == outcomes[0].message_id  # type: ignore[union-attr]

    rows_a, rows_b = db(first.org_id), db(second.org_id)
    assert len(stored(rows_a, channel_a, earlier["payload"]["id"])) == 1
    assert stored(rows_a, channel_a, bad_signature["payload"]["id"]) == []
    assert stored(rows_a, channel_b, of_second["payload"]["id"]) == []  # row-level security: not org A's
    assert len(stored(rows_b, channel_b, of_second["payload"]["id"])) == 1
    conversation = rows_a.scalars(
        select(Conversation).where(Conversation.channel_session_id == channel_a.id, Conversation.chat_id == busy_chat)
    ).one()
    serde = Serde.from_settings(api_settings.kafka)
    texts = [
        serde.decode(Topics.DISPATCH_REQUESTED, row.payload).message.text  # type: ignore[union-attr]
        for row in dispatch_rows(rows_a, conversation.id)
    ]
    assert texts == ["primeira", "segunda"]


async def test_concurrent_webhooks_share_transactions_and_are_all_stored(
    api_settings: ApiSettings, make_org: Callable[..., OrgHandle], db: Callable[[uuid.UUID], Session]
) -> None:
    from services.api.app import create_app

    app = create_app(api_settings.model_copy(update={"webhook_writers": 1}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
            org = make_org()
            channel = await connect_channel(client, org)
            events = [message_event(channel, chat=chat(), body=f"mensagem {i}") for i in range(40)]
            writer: WebhookGroupCommit = app.state.webhook_writer
            before = writer.stats.batches

            responses = await asyncio.gather(*(deliver(client, encode(e), channel.secret) for e in events))

            batches = writer.stats.batches - before
    assert [r.status_code for r in responses] == [200] * 40, [r.text for r in responses if r.status_code != 200]
    assert all(r.json()["data"]["dispatched"] for r in responses)
    assert batches < 40, "no two deliveries shared a transaction"
    session = db(org.org_id)
    for event in events:
        assert len(stored(session, channel, event["payload"]["id"])) == 1


async def test_a_failed_batch_is_written_again_one_delivery_at_a_time(
    client: httpx.AsyncClient,
    org: OrgHandle,
    api_settings: ApiSettings,
    db: Callable[[uuid.UUID], Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delivery whose writes hit a database error (here a real one: PostgreSQL refuses a
    division by zero and aborts the transaction) rolls its batch back; the batch is written
    again one delivery per transaction, so only that delivery fails."""
    channel = await connect_channel(client, org)
    store = service._store_message

    def store_or_fail(session: Session, outbox: Any, **kwargs: Any) -> WebhookResult:
        result = store(session, outbox, **kwargs)
        if kwargs["message"].body == "boom":
            session.execute(text("SELECT 1 / 0"))
        return result

    monkeypatch.setattr(service, "_store_message", store_or_fail)
    events = [message_event(channel, chat=chat(), body="boom" if i == 2 else f"mensagem {i}") for i in range(5)]
    database = Database.connect(api_settings.database)
    writer = WebhookGroupCommit(
        database.sessions,
        keyring=KeyRing.from_settings(api_settings.runtime),
        serde=Serde.from_settings(api_settings.kafka),
        writers=1,
        on_commit=lambda: commits.append(1),  # the API passes its relay's wake()
    )
    commits: list[int] = []
    writer.start()
    try:
        # Queued before the writer runs again: one batch of five.
        outcomes = await asyncio.gather(
            *(writer.submit(delivery(channel, event)) for event in events), return_exceptions=True
        )
    finally:
        await writer.stop()
        await database.dispose()

    assert writer.stats.largest_batch == 5
    assert writer.stats.retried_batches == 1
    assert len(commits) == 4, "each delivery written alone and dispatched wakes the relay once"
    assert isinstance(outcomes[2], Exception) and "division by zero" in str(outcomes[2])
    assert all(isinstance(outcomes[i], WebhookResult) and outcomes[i].dispatched for i in (0, 1, 3, 4))  # type: ignore[union-attr]
    session = db(org.org_id)
    assert stored(session, channel, events[2]["payload"]["id"]) == []
    for i in (0, 1, 3, 4):
        assert len(stored(session, channel, events[i]["payload"]["id"])) == 1
    with pytest.raises(WriterStopped):
        await writer.submit(delivery(channel, events[0]))


async def test_readiness_reports_the_webhook_writer(client: httpx.AsyncClient) -> None:
    answer = await client.get("/readyz")
    assert answer.json()["checks"]["webhook_writer"] is True
