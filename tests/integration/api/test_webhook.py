"""WAHA webhook: signature, idempotent ingest, what is dispatched and what is only stored."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from services.api.settings import ApiSettings
from services.api.webhooks.service import sign
from switchboard.contracts import DispatchRequested, Serde, Topics, WakeReason
from switchboard.db.models.channels import ChannelSession, Contact, Conversation, Message
from switchboard.db.session import set_tenant
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


@pytest.fixture
def api_settings(api_settings: ApiSettings) -> ApiSettings:
    """No in-process outbox relay: these tests read the outbox rows themselves (the relay has its own tests)."""
    return api_settings.model_copy(update={"outbox_relay": False})


WEBHOOK = "/api/v1/webhooks/waha"


@dataclass
class Channel:
    org: OrgHandle
    id: uuid.UUID
    name: str
    secret: str


async def connect_channel(
    client: httpx.AsyncClient, org: OrgHandle, name: str | None = None, base_url: str | None = None
) -> Channel:
    name = name or f"sess-{uuid.uuid4().hex[:12]}"
    created = await client.post(
        "/api/v1/channel-sessions",
        json={"label": "Main line", "external_session": name, "phone_number": "+5511900000000", "base_url": base_url},
        headers=org.headers(),
    )
    assert created.status_code == 201, created.text
    data = created.json()["data"]
    return Channel(org=org, id=uuid.UUID(data["id"]), name=name, secret=data["webhook_secret"])


def message_event(
    channel: Channel,
    *,
    message_id: str | None = None,
    chat: str = "5511988887777@c.us",
    body: str = "Oi, quero saber o preço",
    from_me: bool = False,
    participant: str | None = None,
    event: str = "message",
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": message_id or f"false_{chat}_{uuid.uuid4().hex.upper()}",
        "timestamp": 1767225600,
        "from": "5511900000000@c.us" if from_me else chat,
        "fromMe": from_me,
        "to": chat if from_me else "5511900000000@c.us",
        "body": body,
        "participant": participant,
        "hasMedia": False,
    }
    return {
        "id": f"evt_{uuid.uuid4().hex}",
        "timestamp": 1767225600123,
        "event": event,
        "session": channel.name,
        "me": {"id": "5511900000000@c.us", "pushName": "Loja"},
        "payload": payload,
    }


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


async def deliver(
    client: httpx.AsyncClient,
    raw: bytes,
    secret: str | None,
    *,
    headers: dict[str, str] | None = None,
    session_id: uuid.UUID | None = None,
) -> httpx.Response:
    """POST to the name-routed URL, or with ``session_id`` to that session's own URL."""
    sent = {"Content-Type": "application/json", "X-Webhook-Hmac-Algorithm": "sha512", **(headers or {})}
    if secret is not None:
        sent["X-Webhook-Hmac"] = sign(secret, raw)
    return await client.post(WEBHOOK if session_id is None else f"{WEBHOOK}/{session_id}", content=raw, headers=sent)


def messages(session: Session, channel: Channel, external_id: str) -> list[Message]:
    return list(
        session.scalars(
            select(Message).where(Message.channel_session_id == channel.id, Message.external_id == external_id)
        )
    )


def dispatch_rows(session: Session, conversation_id: uuid.UUID) -> list[Any]:
    """Outbox rows of ``dispatch_requested`` keyed by this conversation (the outbox is a global table)."""
    return list(
        session.execute(
            text("SELECT id, key, payload, headers FROM outbox WHERE topic = :t AND key = :k ORDER BY id"),
            {"t": Topics.DISPATCH_REQUESTED.name, "k": str(conversation_id).encode()},
        )
    )


async def test_same_delivery_twice_stores_one_message_and_one_dispatch(
    client: httpx.AsyncClient, org: OrgHandle, api_settings: ApiSettings, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    event = message_event(channel)
    raw = encode(event)

    first = await deliver(client, raw, channel.secret, headers={"X-Request-Id": "req-webhook-1"})
    assert first.status_code == 200, first.text
    assert first.json()["data"]["dispatched"] is True and first.json()["data"]["duplicate"] is False
    again = await deliver(client, raw, channel.secret)
    assert again.status_code == 200, again.text
    assert again.json()["data"] == {
        "message_id": first.json()["data"]["message_id"],
        "dispatched": False,
        "duplicate": True,
        "reason": "duplicate",
    }

    session = db(org.org_id)
    stored = messages(session, channel, event["payload"]["id"])
    assert len(stored) == 1
    message = stored[0]
    assert str(message.id) == first.json()["data"]["message_id"]
    assert (message.direction, message.sender, message.from_me, message.body) == (
        "inbound",
        "contact",
        False,
        "Oi, quero saber o preço",
    )
    conversation = session.get(Conversation, message.conversation_id)
    assert conversation is not None and conversation.status == "open" and conversation.chat_id == "5511988887777@c.us"
    contact = session.get(Contact, conversation.contact_id)
    assert (
        contact is not None and contact.external_id == "5511988887777@c.us" and contact.phone_number == "+5511988887777"
    )

    rows = dispatch_rows(session, conversation.id)
    assert len(rows) == 1
    record = Serde.from_settings(api_settings.kafka).decode(Topics.DISPATCH_REQUESTED, rows[0].payload)
    assert isinstance(record, DispatchRequested)
    assert record.org_id == org.org_id
    assert record.conversation_id == conversation.id and record.contact_id == contact.id
    assert record.channel_session_id == channel.id
    assert record.wake_reason == WakeReason.USER_MESSAGE
    assert record.wake_context.message_id == message.id
    assert record.dry_run is False and record.target_agent_id is None
    assert record.request_id == "req-webhook-1"
    assert record.message is not None
    assert record.message.message_id == message.id
    assert record.message.external_id == event["payload"]["id"]
    assert record.message.chat_id == "5511988887777@c.us"
    assert record.message.text == "Oi, quero saber o preço"
    assert record.message.from_me is False and record.message.is_group is False
    assert record.message.received_at.timestamp() == 1767225600
    assert rows[0].headers["event_id"] == str(record.event_id)


async def test_twenty_identical_deliveries_in_parallel_store_one_message_and_one_dispatch(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    # A first-contact chat, so contact and conversation creation race as well.
    event = message_event(channel, chat=f"55119{uuid.uuid4().int % 10**8:08d}@c.us")
    raw = encode(event)

    responses = await asyncio.gather(*(deliver(client, raw, channel.secret) for _ in range(20)))

    assert [r.status_code for r in responses] == [200] * 20, [r.text for r in responses if r.status_code != 200]
    bodies = [r.json()["data"] for r in responses]
    assert sum(b["dispatched"] for b in bodies) == 1
    assert sum(b["duplicate"] for b in bodies) == 19
    assert len({b["message_id"] for b in bodies}) == 1
    session = db(org.org_id)
    stored = messages(session, channel, event["payload"]["id"])
    assert len(stored) == 1
    assert len(dispatch_rows(session, stored[0].conversation_id)) == 1
    contacts = session.scalars(select(Contact).where(Contact.external_id == event["payload"]["from"])).all()
    assert len(contacts) == 1


async def test_first_contact_race_of_different_messages_makes_one_conversation(
    client: httpx.AsyncClient, org: OrgHandle, api_settings: ApiSettings, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    chat = f"55118{uuid.uuid4().int % 10**8:08d}@c.us"
    events = [message_event(channel, chat=chat, body=f"mensagem {i}") for i in range(10)]

    responses = await asyncio.gather(*(deliver(client, encode(e), channel.secret) for e in events))

    assert [r.status_code for r in responses] == [200] * 10
    assert all(r.json()["data"]["dispatched"] for r in responses)
    session = db(org.org_id)
    conversations = session.scalars(select(Conversation).where(Conversation.chat_id == chat)).all()
    assert len(conversations) == 1
    assert len(session.scalars(select(Contact).where(Contact.external_id == chat)).all()) == 1
    rows = dispatch_rows(session, conversations[0].id)
    serde = Serde.from_settings(api_settings.kafka)
    texts = sorted(serde.decode(Topics.DISPATCH_REQUESTED, row.payload).message.text for row in rows)  # type: ignore[union-attr]
    assert texts == sorted(f"mensagem {i}" for i in range(10))


async def test_group_and_own_messages_are_stored_but_not_dispatched(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    group = message_event(channel, chat="120363025555555555@g.us", participant="5511977776666@c.us")
    own = message_event(channel, chat="5511966665555@c.us", from_me=True, body="Já respondo!", event="message.any")

    group_response = await deliver(client, encode(group), channel.secret)
    own_response = await deliver(client, encode(own), channel.secret)

    assert group_response.status_code == 200 and own_response.status_code == 200
    assert group_response.json()["data"]["dispatched"] is False
    assert group_response.json()["data"]["reason"] == "group"
    assert own_response.json()["data"]["dispatched"] is False
    # The business typed it on its phone: a person is answering, the agents stay out (docs/api.md).
    assert own_response.json()["data"]["reason"] == "owner_took_over"

    session = db(org.org_id)
    (group_message,) = messages(session, channel, group["payload"]["id"])
    (own_message,) = messages(session, channel, own["payload"]["id"])
    assert group_message.attributes["participant"] == "5511977776666@c.us"
    group_conversation = session.get(Conversation, group_message.conversation_id)
    assert group_conversation is not None and group_conversation.is_group and group_conversation.contact_id is None
    assert own_message.from_me and own_message.direction == "outbound" and own_message.body == "Já respondo!"
    own_conversation = session.get(Conversation, own_message.conversation_id)
    assert own_conversation is not None and own_conversation.chat_id == "5511966665555@c.us"
    assert own_conversation.status == "handoff"
    assert dispatch_rows(session, group_message.conversation_id) == []
    assert dispatch_rows(session, own_message.conversation_id) == []


async def test_the_owner_commands_the_agent_from_the_business_phone(
    client: httpx.AsyncClient, org: OrgHandle, api_settings: ApiSettings, db: Callable[[uuid.UUID], Session]
) -> None:
    """A well-formed ``/goal`` (``/plan``, ``/loop``, ``/skill:``) the owner writes in a customer's chat is
    dispatched, marked ``from_me`` (the runner acts on commands only then); a malformed one is only
    stored — its error would go to the customer."""
    channel = await connect_channel(client, org)
    chat = "5511944443333@c.us"
    opening = message_event(channel, chat=chat, body="Oi")  # the customer opened the conversation
    assert (await deliver(client, encode(opening), channel.secret)).json()["data"]["dispatched"] is True
    goal = message_event(channel, chat=chat, from_me=True, body="/goal win this customer back --budget 2")
    bad = message_event(channel, chat=chat, from_me=True, body="/goal win --budget abc")
    goal_response = await deliver(client, encode(goal), channel.secret)
    bad_response = await deliver(client, encode(bad), channel.secret)
    assert goal_response.json()["data"]["dispatched"] is True, goal_response.text
    assert (bad_response.json()["data"]["dispatched"], bad_response.json()["data"]["reason"]) == (False, "from_me")
    # Written to the agent, not to the customer: neither takes the conversation over from the agents.
    conversation = db(org.org_id).scalars(select(Conversation).where(Conversation.chat_id == chat)).one()
    assert conversation.status == "open"

    session = db(org.org_id)
    (stored,) = messages(session, channel, goal["payload"]["id"])
    assert stored.from_me and stored.sender == "human"
    rows = dispatch_rows(session, stored.conversation_id)
    serde = Serde.from_settings(api_settings.kafka)
    records = [serde.decode(Topics.DISPATCH_REQUESTED, row.payload) for row in rows]
    assert [(r.message.text, r.message.from_me) for r in records] == [  # type: ignore[attr-defined]
        ("Oi", False),
        ("/goal win this customer back --budget 2", True),
    ]


async def test_the_customers_whatsapp_name_names_a_contact_that_has_none(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    chat = "5511933332222@c.us"

    def named(body: str, *, from_me: bool = False, **data: str) -> dict[str, Any]:
        event = message_event(channel, chat=chat, body=body, from_me=from_me)
        event["payload"]["_data"] = data
        return event

    for event in (
        named("Oi", notifyName="  Maria Souza "),  # WEBJS
        named("Sou eu de novo", pushName="Mary"),  # NOWEB, a later name: kept as it was
        named("Já respondo", from_me=True, notifyName="Loja"),  # the business's own name
    ):
        assert (await deliver(client, encode(event), channel.secret)).status_code == 200
    session = db(org.org_id)
    contact = session.scalars(select(Contact).where(Contact.external_id == chat)).one()
    assert contact.display_name == "Maria Souza"

    nameless = "5511922221111@c.us"
    first = message_event(channel, chat=nameless, body="Oi")
    assert (await deliver(client, encode(first), channel.secret)).status_code == 200
    later = message_event(channel, chat=nameless, body="Oi?")
    later["payload"]["_data"] = {"pushName": "Ana"}
    assert (await deliver(client, encode(later), channel.secret)).status_code == 200
    session.expire_all()
    filled = session.scalars(select(Contact).where(Contact.external_id == nameless)).one()
    assert filled.display_name == "Ana", "a contact without a name gets the first one seen"


async def test_conversation_with_the_humans_is_stored_but_not_dispatched(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    first = message_event(channel, chat="5511955554444@c.us")
    assert (await deliver(client, encode(first), channel.secret)).json()["data"]["dispatched"] is True
    session = db(org.org_id)
    (stored,) = messages(session, channel, first["payload"]["id"])
    conversation_id = stored.conversation_id
    session.execute(update(Conversation).where(Conversation.id == conversation_id).values(status="handoff"))
    session.commit()

    later = message_event(channel, chat="5511955554444@c.us", body="Alô?")
    response = await deliver(client, encode(later), channel.secret)

    assert response.status_code == 200
    assert response.json()["data"]["dispatched"] is False and response.json()["data"]["reason"] == "human_handoff"
    check = db(org.org_id)
    assert len(messages(check, channel, later["payload"]["id"])) == 1
    assert len(dispatch_rows(check, conversation_id)) == 1  # only the first message's


async def test_closed_conversation_reopens_when_the_customer_writes_again(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    first = message_event(channel, chat="5511944443333@c.us")
    await deliver(client, encode(first), channel.secret)
    session = db(org.org_id)
    (stored,) = messages(session, channel, first["payload"]["id"])
    conversation_id = stored.conversation_id
    session.execute(update(Conversation).where(Conversation.id == conversation_id).values(status="closed"))
    session.commit()

    response = await deliver(client, encode(message_event(channel, chat="5511944443333@c.us")), channel.secret)

    assert response.json()["data"]["dispatched"] is True
    check = db(org.org_id)
    conversation = check.get(Conversation, conversation_id)
    assert conversation is not None and conversation.status == "open"
    assert len(dispatch_rows(check, conversation_id)) == 2


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="missing"),
        pytest.param({"X-Webhook-Hmac": "00" * 64}, id="wrong"),
        pytest.param({"X-Webhook-Hmac": "not-hex-\u00e9"}, id="garbage"),
        pytest.param({"X-Webhook-Hmac-Algorithm": "sha256"}, id="other-algorithm"),
    ],
)
async def test_bad_signature_is_401_and_stores_nothing(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session], headers: dict[str, str]
) -> None:
    channel = await connect_channel(client, org)
    event = message_event(channel)
    raw = encode(event)
    sent = {"Content-Type": "application/json", "X-Webhook-Hmac-Algorithm": "sha512", **headers}
    if "X-Webhook-Hmac" not in headers and "X-Webhook-Hmac-Algorithm" in headers:
        sent["X-Webhook-Hmac"] = sign(channel.secret, raw)  # right signature, refused algorithm
    # Latin-1 on the wire, as a proxy might forward a non-ASCII header.
    wire = [(k.encode(), v.encode("latin-1")) for k, v in sent.items()]

    response = await client.post(WEBHOOK, content=raw, headers=wire)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert messages(db(org.org_id), channel, event["payload"]["id"]) == []


async def test_a_body_changed_after_signing_is_refused(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = await connect_channel(client, org)
    raw = encode(message_event(channel))
    signature = sign(channel.secret, raw)
    tampered = raw.replace(b"Oi, quero", b"Oi, QUERO")
    response = await client.post(WEBHOOK, content=tampered, headers={"X-Webhook-Hmac": signature})
    assert response.status_code == 401


async def test_unknown_session_is_401_like_a_bad_signature(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = await connect_channel(client, org)
    unknown = Channel(org=org, id=uuid.uuid4(), name=f"nobody-{uuid.uuid4().hex[:8]}", secret=channel.secret)
    unknown_response = await deliver(client, encode(message_event(unknown)), channel.secret)
    bad_response = await deliver(client, encode(message_event(channel)), "sbwh_not-the-secret")
    assert unknown_response.status_code == bad_response.status_code == 401
    assert unknown_response.json()["error"] == bad_response.json()["error"]


async def test_another_orgs_session_secret_does_not_validate(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle], db: Callable[[uuid.UUID], Session]
) -> None:
    org_a, org_b = make_org(name="A"), make_org(name="B")
    channel_a = await connect_channel(client, org_a)
    channel_b = await connect_channel(client, org_b)
    event = message_event(channel_b)

    response = await deliver(client, encode(event), channel_a.secret)

    assert response.status_code == 401
    assert messages(db(org_b.org_id), channel_b, event["payload"]["id"]) == []
    # The right secret still works.
    assert (await deliver(client, encode(event), channel_b.secret)).status_code == 200


async def test_sessions_sharing_a_name_are_each_reached_by_their_own_url(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle], db: Callable[[uuid.UUID], Session]
) -> None:
    """Two businesses on WAHA Core, both ``default``: each session's URL routes to that session
    alone, signed with its own secret; the name-routed URL reaches only the first; a URL given
    another session's delivery is refused (422 ``session_mismatch``), an unknown one is a 401."""
    name = f"default-{uuid.uuid4().hex[:8]}"
    org_a, org_b = make_org(name="A"), make_org(name="B")
    channel_a = await connect_channel(client, org_a, name, base_url="http://waha-a.internal:3000")
    channel_b = await connect_channel(client, org_b, name, base_url="http://waha-b.internal:3000")
    event_a, event_b = message_event(channel_a), message_event(channel_b)

    to_a = await deliver(client, encode(event_a), channel_a.secret, session_id=channel_a.id)
    to_b = await deliver(client, encode(event_b), channel_b.secret, session_id=channel_b.id)
    assert (to_a.status_code, to_b.status_code) == (200, 200), to_b.text
    assert to_a.json()["data"]["dispatched"] and to_b.json()["data"]["dispatched"]
    assert len(messages(db(org_a.org_id), channel_a, event_a["payload"]["id"])) == 1
    assert len(messages(db(org_b.org_id), channel_b, event_b["payload"]["id"])) == 1
    assert messages(db(org_a.org_id), channel_a, event_b["payload"]["id"]) == []

    # B's secret on A's URL, and B's delivery on the name-routed URL (which routes to A): refused.
    crossed = await deliver(client, encode(message_event(channel_b)), channel_b.secret, session_id=channel_a.id)
    by_name = await deliver(client, encode(message_event(channel_b)), channel_b.secret)
    assert (crossed.status_code, by_name.status_code) == (401, 401)
    assert (await deliver(client, encode(message_event(channel_a)), channel_a.secret)).status_code == 200

    mismatch = message_event(channel_a) | {"session": "another-session"}
    wrong = await deliver(client, encode(mismatch), channel_a.secret, session_id=channel_a.id)
    assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "session_mismatch", wrong.text
    assert messages(db(org_a.org_id), channel_a, mismatch["payload"]["id"]) == []
    unknown = await deliver(client, encode(message_event(channel_a)), channel_a.secret, session_id=uuid.uuid4())
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b"", id="empty"),
        pytest.param(b"[1, 2, 3]", id="array"),
        pytest.param(b'{"event": "message", "payload": {}}', id="no-session"),
        pytest.param(b'{"event": "message", "session": "x", "payload": "text"}', id="payload-not-object"),
        pytest.param(b"\xff\xfe\x00garbage", id="binary"),
    ],
)
async def test_malformed_body_is_422_validation_error(client: httpx.AsyncClient, org: OrgHandle, raw: bytes) -> None:
    channel = await connect_channel(client, org)
    response = await deliver(client, raw, channel.secret)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"from": "5511999999999@c.us", "body": "no id"}, id="missing-id"),
        pytest.param({"id": "x", "body": "no from"}, id="missing-from"),
        pytest.param({"id": "x", "from": "5511999999999@c.us", "fromMe": "perhaps"}, id="bad-fromMe"),
        pytest.param({"id": "x", "from": "5511900000000@c.us", "fromMe": True}, id="own-without-to"),
        pytest.param({"id": "", "from": "5511999999999@c.us"}, id="empty-id"),
    ],
)
async def test_signed_but_malformed_message_payload_is_422(
    client: httpx.AsyncClient, org: OrgHandle, payload: dict[str, Any]
) -> None:
    channel = await connect_channel(client, org)
    raw = encode({"event": "message", "session": channel.name, "payload": payload})
    response = await deliver(client, raw, channel.secret)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


async def test_bad_input_does_not_break_the_next_delivery(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = await connect_channel(client, org)
    for raw in (b"{", b'{"event": "message", "session": "' + channel.name.encode() + b'", "payload": {}}'):
        assert (await deliver(client, raw, channel.secret)).status_code == 422
    too_big = b'{"pad": "' + b"x" * (1024 * 1024) + b'"}'
    response = await deliver(client, too_big, channel.secret)
    assert response.status_code == 413 and response.json()["error"]["code"] == "payload_too_large"
    assert (await deliver(client, encode(message_event(channel)), channel.secret)).json()["data"]["dispatched"]


async def test_other_events_are_acknowledged_and_ignored(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = await connect_channel(client, org)
    raw = encode({"event": "message.reaction", "session": channel.name, "payload": {"reaction": {"text": "👍"}}})
    response = await deliver(client, raw, channel.secret)
    assert response.status_code == 200
    assert response.json()["data"] == {
        "message_id": None,
        "dispatched": False,
        "duplicate": False,
        "reason": "event_ignored",
    }
    # Unsigned, an ignored event type is still refused: nothing is answered to strangers.
    assert (await deliver(client, raw, None)).status_code == 401


async def test_status_broadcasts_are_not_stored(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    event = message_event(channel, chat="status@broadcast")
    response = await deliver(client, encode(event), channel.secret)
    assert response.json()["data"]["reason"] == "broadcast" and response.json()["data"]["message_id"] is None
    assert messages(db(org.org_id), channel, event["payload"]["id"]) == []


async def test_session_status_event_follows_waha_state(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    channel = await connect_channel(client, org)
    raw = encode({"event": "session.status", "session": channel.name, "payload": {"status": "WORKING"}})
    response = await deliver(client, raw, channel.secret)
    assert response.status_code == 200 and response.json()["data"]["reason"] == "session_status"
    row = db(org.org_id).get(ChannelSession, channel.id)
    assert row is not None and row.status == "working"
    shown = await client.get(f"/api/v1/channel-sessions/{channel.id}", headers=org.headers())
    assert shown.json()["data"]["status"] == "working"


async def test_session_status_reports_apply_in_the_order_waha_made_them(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    """WAHA retries failed deliveries: a ``STARTING`` arriving after the ``WORKING`` that followed it
    must not set the number back (agents could not be bound to it), and a signed ``FAILED`` body
    replayed after the number came back must not mark it down again."""
    channel = await connect_channel(client, org)

    async def report(status: str, at_ms: int) -> str:
        raw = encode(
            {"event": "session.status", "session": channel.name, "timestamp": at_ms, "payload": {"status": status}}
        )
        response = await deliver(client, raw, channel.secret)
        assert response.status_code == 200, response.text
        return str(response.json()["data"]["reason"])

    def status() -> str:
        row = db(org.org_id).get(ChannelSession, channel.id)
        assert row is not None
        return row.status

    base = 1_764_900_000_000
    assert await report("WORKING", base + 2_000) == "session_status"
    assert await report("STARTING", base + 1_000) == "session_status_stale"  # retried late
    assert status() == "working"
    failed = base + 3_000
    assert await report("FAILED", failed) == "session_status"
    assert status() == "failed"
    assert await report("WORKING", base + 4_000) == "session_status"
    assert await report("FAILED", failed) == "session_status_stale"  # the same signed body, replayed
    assert status() == "working"
    # A report without a timestamp still applies (older WAHA builds).
    raw = encode({"event": "session.status", "session": channel.name, "payload": {"status": "STOPPED"}})
    assert (await deliver(client, raw, channel.secret)).json()["data"]["reason"] == "session_status"
    assert status() == "stopped"


async def test_a_message_with_nul_characters_is_stored_without_them(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    """WAHA would retry a refused delivery forever: NUL characters are dropped, the message kept."""
    channel = await connect_channel(client, org)
    event = message_event(channel, body="oi\u0000 tudo bem?")
    response = await deliver(client, encode(event), channel.secret)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["dispatched"] is True
    stored = messages(db(org.org_id), channel, event["payload"]["id"])
    assert [m.body for m in stored] == ["oi tudo bem?"]


async def test_a_message_with_half_an_emoji_is_stored_with_a_replacement_character(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    """A sender's client cut an emoji in half: JSON carries a lone surrogate escape (as Node's
    ``JSON.stringify`` writes it), which PostgreSQL cannot store. It becomes U+FFFD, the whole
    emojis around it stay, and the message is kept (it was a 422 — lost, as WAHA retries it the same)."""
    channel = await connect_channel(client, org)
    event = message_event(channel, body="obrigada \ud83d e até amanhã \ud83d\ude00")
    raw = encode(event)
    assert b"\\ud83d e" in raw, "the body travels as escapes, as WAHA's Node sends it"
    response = await deliver(client, raw, channel.secret)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["dispatched"] is True
    stored = messages(db(org.org_id), channel, event["payload"]["id"])
    assert [m.body for m in stored] == ["obrigada \ufffd e até amanhã \U0001f600"]


def _platform_reply(
    session: Session,
    channel: Channel,
    conversation_id: uuid.UUID,
    body: str,
    *,
    age_s: int,
    external_id: str | None = None,
    delivery_status: str = "pending",
    sender: str = "agent",
) -> Message:
    """An agent's reply as the notifier stores it before calling the channel: no channel id yet."""
    row = Message(
        org_id=channel.org.org_id,
        conversation_id=conversation_id,
        channel_session_id=channel.id,
        direction="outbound",
        sender=sender,
        dedupe_key=f"reply:{uuid.uuid4()}",
        external_id=external_id,
        body=body,
        delivery_status=delivery_status,
    )
    session.add(row)
    session.flush()
    session.execute(
        text("UPDATE messages SET occurred_at = now() - make_interval(secs => :age) WHERE id = :id"),
        {"age": age_s, "id": row.id},
    )
    session.commit()
    set_tenant(session, channel.org.org_id)  # the commit ended the transaction that held the tenant
    return row


async def test_the_channels_echo_of_a_platform_reply_is_not_stored_twice(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    """WAHA's ``message.any`` copy of our own reply can arrive before the send's answer gave us its id:
    it is matched to the reply (which takes the id), not stored again as a person's message."""
    channel = await connect_channel(client, org)
    chat = "5511933332222@c.us"
    opening = message_event(channel, chat=chat, body="Quanto custa?")
    opened = (await deliver(client, encode(opening), channel.secret)).json()["data"]
    session = db(org.org_id)
    conversation_id = session.get(Message, uuid.UUID(opened["message_id"])).conversation_id  # type: ignore[union-attr]
    reply = _platform_reply(session, channel, conversation_id, "Custa R$ 10.", age_s=5)
    stale = _platform_reply(session, channel, conversation_id, "Bom dia!", age_s=11 * 60)
    # A person's message sent from Switchboard after a handoff: the platform wrote it too.
    person = _platform_reply(session, channel, conversation_id, "Sou a Ana.", age_s=2, sender="human")
    person_echo = message_event(channel, chat=chat, from_me=True, body="Sou a Ana.", event="message.any")
    person_result = (await deliver(client, encode(person_echo), channel.secret)).json()["data"]
    assert (person_result["message_id"], person_result["reason"]) == (str(person.id), "echo")
    # A reply withheld after a takeover was never sent: the person pasting it on the phone wrote it.
    withheld = _platform_reply(session, channel, conversation_id, "Seu pedido saiu.", age_s=3, delivery_status="failed")
    session.execute(
        text("UPDATE messages SET delivery_error = 'conversation_with_humans' WHERE id = :id"), {"id": withheld.id}
    )
    session.commit()
    set_tenant(session, channel.org.org_id)
    pasted = message_event(channel, chat=chat, from_me=True, body="Seu pedido saiu.", event="message.any")
    pasted_result = (await deliver(client, encode(pasted), channel.secret)).json()["data"]
    # (and, the first message a person typed in this open conversation, takes it over from the agents)
    assert (pasted_result["duplicate"], pasted_result["reason"]) == (False, "owner_took_over")

    echo = message_event(channel, chat=chat, from_me=True, body="Custa R$ 10.\n", event="message.any")
    first = (await deliver(client, encode(echo), channel.secret)).json()["data"]
    again = (await deliver(client, encode(echo), channel.secret)).json()["data"]
    # The owner typing the same words later, and an echo of a reply older than the window: a person's messages.
    typed = message_event(channel, chat=chat, from_me=True, body="Custa R$ 10.", event="message.any")
    late = message_event(channel, chat=chat, from_me=True, body="Bom dia!", event="message.any")
    typed_result = (await deliver(client, encode(typed), channel.secret)).json()["data"]
    late_result = (await deliver(client, encode(late), channel.secret)).json()["data"]

    assert (first["message_id"], first["duplicate"], first["reason"]) == (str(reply.id), True, "echo")
    assert (again["message_id"], again["duplicate"], again["reason"]) == (str(reply.id), True, "duplicate")
    assert (typed_result["duplicate"], typed_result["reason"]) == (False, "from_me")
    assert (late_result["duplicate"], late_result["reason"]) == (False, "from_me")
    session.expire_all()
    rows = session.scalars(select(Message).where(Message.conversation_id == conversation_id)).all()
    by_sender = sorted((m.sender, m.body, m.external_id) for m in rows)
    assert by_sender == sorted(
        [
            ("contact", "Quanto custa?", opening["payload"]["id"]),
            ("agent", "Custa R$ 10.", echo["payload"]["id"]),
            ("agent", "Bom dia!", None),
            ("human", "Custa R$ 10.", typed["payload"]["id"]),
            ("human", "Bom dia!", late["payload"]["id"]),
            ("human", "Sou a Ana.", person_echo["payload"]["id"]),
            ("agent", "Seu pedido saiu.", None),
            ("human", "Seu pedido saiu.", pasted["payload"]["id"]),
        ]
    )
    assert stale.external_id is None
    assert dispatch_rows(session, conversation_id)[1:] == []  # only the customer's message was dispatched


async def test_attachments_and_locations_are_stored_and_dispatched_with_their_kind(
    client: httpx.AsyncClient, org: OrgHandle, api_settings: ApiSettings, db: Callable[[uuid.UUID], Session]
) -> None:
    """The kind travels with the dispatch (the runner tells the model what was sent); the text is the
    caption, and a location's text is where it is, not the engine's thumbnail in ``body``."""
    channel = await connect_channel(client, org)
    chat = "5511922221111@c.us"
    photo = message_event(channel, chat=chat, body="")
    photo["payload"].update(hasMedia=True, media={"mimetype": "image/jpeg", "url": "http://waha/files/1.jpg"})
    voice = message_event(channel, chat=chat, body="")
    voice["payload"].update(hasMedia=True, media={"mimetype": "audio/ogg; codecs=opus"})
    place = message_event(channel, chat=chat, body="/9j/4AAQSkZJRgABAQAAAQABAAD")
    place["payload"]["location"] = {"latitude": "-23.5613", "longitude": -46.6565, "description": "Av. Paulista"}
    for event in (photo, voice, place):
        response = await deliver(client, encode(event), channel.secret)
        assert response.json()["data"]["dispatched"] is True, response.text

    session = db(org.org_id)
    stored = [messages(session, channel, e["payload"]["id"])[0] for e in (photo, voice, place)]
    assert [(m.content_type, m.body) for m in stored] == [
        ("image", ""),
        ("audio", ""),
        ("location", "Av. Paulista (-23.5613, -46.6565)"),
    ]
    serde = Serde.from_settings(api_settings.kafka)
    records = [
        serde.decode(Topics.DISPATCH_REQUESTED, r.payload) for r in dispatch_rows(session, stored[0].conversation_id)
    ]
    assert [(r.message.content_type.value, r.message.text) for r in records] == [  # type: ignore[attr-defined]
        ("image", ""),
        ("audio", ""),
        ("location", "Av. Paulista (-23.5613, -46.6565)"),
    ]


def _ack(channel: Channel, message_id: str, ack: int | None, ack_name: str | None = None) -> bytes:
    payload: dict[str, Any] = {"id": message_id, "from": "5511900000000@c.us", "fromMe": True}
    if ack is not None:
        payload["ack"] = ack
    if ack_name is not None:
        payload["ackName"] = ack_name
    return encode({"event": "message.ack", "session": channel.name, "payload": payload})


async def test_delivery_receipts_move_an_own_message_forward_never_back(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    """``message.ack``: the inbox shows whether a reply was delivered and read. Receipts come out of
    order and repeated; a status only moves forward, and a customer's message is never touched."""
    channel = await connect_channel(client, org)
    opening = message_event(channel, chat="5511911110000@c.us", body="Oi")
    opened = (await deliver(client, encode(opening), channel.secret)).json()["data"]
    session = db(org.org_id)
    conversation_id = session.get(Message, uuid.UUID(opened["message_id"])).conversation_id  # type: ignore[union-attr]
    reply = _platform_reply(
        session,
        channel,
        conversation_id,
        "Olá!",
        age_s=1,
        external_id="true_5511911110000@c.us_R1",
        delivery_status="sent",
    )
    failing = _platform_reply(
        session,
        channel,
        conversation_id,
        "Até logo",
        age_s=1,
        external_id="true_5511911110000@c.us_R2",
        delivery_status="sent",
    )

    async def status_after(raw: bytes) -> tuple[str | None, str]:
        data = (await deliver(client, raw, channel.secret)).json()["data"]
        assert data["reason"] == "delivery_ack" and data["dispatched"] is False
        session.expire_all()
        row = session.get(Message, reply.id)
        assert row is not None
        return data["message_id"], row.delivery_status

    moved = str(reply.id)
    assert await status_after(_ack(channel, reply.external_id or "", 2)) == (moved, "delivered")
    assert await status_after(_ack(channel, reply.external_id or "", 1)) == (None, "delivered")  # late: stays
    assert await status_after(_ack(channel, reply.external_id or "", None, "READ")) == (moved, "read")
    assert await status_after(_ack(channel, reply.external_id or "", 4)) == (None, "read")  # played is read
    assert await status_after(_ack(channel, reply.external_id or "", -1)) == (None, "read")  # read beats an error
    assert await status_after(_ack(channel, "true_unknown_message", 3)) == (None, "read")
    # An error marks a message not yet delivered; the customer's own message has no receipts of ours.
    await deliver(client, _ack(channel, failing.external_id or "", -1), channel.secret)
    await deliver(client, _ack(channel, opening["payload"]["id"], 3), channel.secret)
    session.expire_all()
    assert session.get(Message, failing.id).delivery_status == "failed"  # type: ignore[union-attr]
    assert session.get(Message, uuid.UUID(opened["message_id"])).delivery_status == "received"  # type: ignore[union-attr]
    shown = await client.get(f"/api/v1/conversations/{conversation_id}/messages", headers=org.headers())
    assert {m["body"]: m["delivery_status"] for m in shown.json()["data"]} == {
        "Oi": "received",
        "Olá!": "read",
        "Até logo": "failed",
    }
    bad = await deliver(client, _ack(channel, reply.external_id or "", 9), channel.secret)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"


async def test_a_working_number_that_disconnects_is_announced_once_per_outage(
    client: httpx.AsyncClient, org: OrgHandle, api_settings: ApiSettings, db: Callable[[uuid.UUID], Session]
) -> None:
    """Silence is the worst failure: a session that stops working becomes a critical Home insight and an
    ``insights`` record (the notifier's ``channel.disconnected``) — once per outage, not per report."""
    channel = await connect_channel(client, org)

    async def report(status: str) -> None:
        raw = encode({"event": "session.status", "session": channel.name, "payload": {"status": status}})
        response = await deliver(client, raw, channel.secret)
        assert response.json()["data"]["reason"] == "session_status", response.text

    await report("STOPPED")  # starting -> stopped: it never worked, nothing was lost
    await report("WORKING")
    await report("SCAN_QR_CODE")  # logged out
    await report("SCAN_QR_CODE")  # WAHA reports it again: the same outage
    await report("WORKING")
    await report("FAILED")  # a second outage

    session = db(org.org_id)
    insights = session.execute(
        text("SELECT dedupe_key, severity, area, title, body, status FROM workspace_insights ORDER BY created_at")
    ).all()
    assert len(insights) == 2
    assert all(i.dedupe_key.startswith(f"channel_down:{channel.id}:") for i in insights)
    assert insights[0].dedupe_key != insights[1].dedupe_key
    assert [(i.severity, i.area, i.status) for i in insights] == [("critical", "cross", "new")] * 2
    assert insights[0].title == "WhatsApp number Main line (+5511900000000) is disconnected"
    assert "scan the QR code" in insights[0].body and "restart it in WAHA" in insights[1].body
    serde = Serde.from_settings(api_settings.kafka)
    rows = session.execute(
        text("SELECT payload FROM outbox WHERE topic = :t AND key = :k ORDER BY id"),
        {"t": Topics.INSIGHTS.name, "k": str(org.org_id).encode()},
    ).all()
    records = [serde.decode(Topics.INSIGHTS, r.payload) for r in rows]
    assert [r.insight_key for r in records] == [i.dedupe_key for i in insights]  # type: ignore[attr-defined]
    row = session.get(ChannelSession, channel.id)
    assert row is not None and row.status == "failed"
