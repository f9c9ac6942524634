"""The inbox over HTTP: conversations (who waits for a human), their messages, and the
dispatcher's decisions (why a message got no answer) — keyset-paged, newest first, per org."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from switchboard.db.enums import Role
from switchboard.db.models.channels import Contact, Conversation, Message
from switchboard.db.models.runs import DispatchDecision
from tests.integration.brief.scene import Scene, make_scene
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)


def _seed(scene: Scene) -> dict[str, uuid.UUID]:
    """The scene's conversation with three messages and their decisions, and a handed-off one."""
    ids: dict[str, uuid.UUID] = {"open": scene.conversation_id}
    with tenant_session(scene.org) as session:
        contact = Contact(org_id=scene.org_id, external_id=f"55{uuid.uuid4().int % 10**11:011d}@c.us")
        session.add(contact)
        session.flush()
        handed = Conversation(
            org_id=scene.org_id,
            channel_session_id=scene.channel_session_id,
            contact_id=contact.id,
            chat_id=contact.external_id,
            status="handoff",
            handoff_at=T0,
            last_message_at=T0,
        )
        session.add(handed)
        session.add(  # Switchboard's own (the daily analysis): never in the inbox
            Conversation(
                org_id=scene.org_id,
                channel_session_id=scene.channel_session_id,
                chat_id="switchboard-analysis",
                last_message_at=T0 + timedelta(hours=1),
            )
        )
        session.get_one(Conversation, scene.conversation_id).last_message_at = T0 + timedelta(minutes=5)
        for n, (direction, sender) in enumerate(
            (("inbound", "contact"), ("outbound", "agent"), ("inbound", "contact"))
        ):
            message = Message(
                org_id=scene.org_id,
                conversation_id=scene.conversation_id,
                channel_session_id=scene.channel_session_id,
                direction=direction,
                sender=sender,
                body=f"message {n}",
                external_id=f"wamid-{uuid.uuid4().hex}",
                occurred_at=T0 + timedelta(minutes=n),
            )
            session.add(message)
            session.flush()
            ids[f"m{n}"] = message.id
        for message, outcome, minute in (("m0", "dispatched", 0), ("m2", "no_match", 2)):
            session.add(
                DispatchDecision(
                    org_id=scene.org_id,
                    dispatch_event_id=uuid.uuid4(),
                    outcome=outcome,
                    conversation_id=scene.conversation_id,
                    inbound_message_id=ids[message],
                    agent_id=scene.agent_id if outcome == "dispatched" else None,
                    run_id=uuid.uuid4() if outcome == "dispatched" else None,
                    details={"candidates": 1} if outcome == "dispatched" else {"rejected": {"keyword_regex": 1}},
                    created_at=T0 + timedelta(minutes=minute),
                )
            )
        session.flush()
        ids["handoff"] = handed.id
    return ids


async def test_the_inbox_lists_conversations_messages_and_decisions(
    client: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    scene = make_scene(stack.database_url)
    ids = _seed(scene)
    manager = scene.org.headers(Role.MANAGER)

    waiting = await client.get("/api/v1/conversations", params={"status": "handoff"}, headers=manager)
    assert waiting.status_code == 200, waiting.text
    assert [c["id"] for c in waiting.json()["data"]] == [str(ids["handoff"])]
    first = await client.get("/api/v1/conversations", params={"limit": 1}, headers=manager)
    rest = await client.get(
        "/api/v1/conversations", params={"limit": 1, "cursor": first.json()["next_cursor"]}, headers=manager
    )
    assert [c["id"] for c in first.json()["data"] + rest.json()["data"]] == [str(ids["open"]), str(ids["handoff"])]
    assert rest.json()["next_cursor"] is None
    bad = await client.get("/api/v1/conversations", params={"status": "asleep"}, headers=manager)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "conversation_filter_invalid"

    path = f"/api/v1/conversations/{scene.conversation_id}"
    newest = await client.get(f"{path}/messages", params={"limit": 2}, headers=manager)
    older = await client.get(f"{path}/messages", params={"cursor": newest.json()["next_cursor"]}, headers=manager)
    bodies = [m["body"] for m in newest.json()["data"] + older.json()["data"]]
    assert bodies == ["message 2", "message 1", "message 0"]
    assert newest.json()["data"][1]["direction"] == "outbound" and newest.json()["data"][1]["sender"] == "agent"

    decisions = await client.get(f"{path}/decisions", headers=manager)
    assert [(d["outcome"], d["inbound_message_id"]) for d in decisions.json()["data"]] == [
        ("no_match", str(ids["m2"])),
        ("dispatched", str(ids["m0"])),
    ]
    why = await client.get(f"{path}/decisions", params={"message_id": str(ids["m2"])}, headers=manager)
    assert [d["details"] for d in why.json()["data"]] == [{"rejected": {"keyword_regex": 1}}]
    unanswered = await client.get("/api/v1/dispatch-decisions", params={"outcome": "no_match"}, headers=manager)
    assert [d["inbound_message_id"] for d in unanswered.json()["data"]] == [str(ids["m2"])]
    bad_outcome = await client.get("/api/v1/dispatch-decisions", params={"outcome": "maybe"}, headers=manager)
    assert bad_outcome.status_code == 422 and bad_outcome.json()["error"]["code"] == "decision_filter_invalid"

    assert (await client.get(f"{path}/messages", headers=scene.org.headers(Role.VIEWER))).status_code == 403
    stranger = make_scene(stack.database_url)
    other = stranger.org.headers(Role.MANAGER)
    assert (await client.get(f"{path}/messages", headers=other)).status_code == 404
    assert (await client.get(f"{path}/decisions", headers=other)).status_code == 404
    assert (await client.get("/api/v1/dispatch-decisions", headers=other)).json()["data"] == []
    theirs = (await client.get("/api/v1/conversations", headers=other)).json()["data"]
    assert [c["id"] for c in theirs] == [str(stranger.conversation_id)]
