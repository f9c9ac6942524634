"""``POST /api/v1/conversations/{id}/commands``: the business's commands reach the agent without
being written into the customer's chat (the run side: tests/integration/runner/test_runner_slash_commands.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from switchboard.db.enums import Role
from switchboard.db.models import Conversation, OutboxEvent
from switchboard.db.models.audit import AuditLogEntry
from tests.integration.db.factories import create_conversation
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


def _conversation(db: Callable[[uuid.UUID], Session], org: OrgHandle) -> uuid.UUID:
    session = db(org.org_id)
    conversation_id = create_conversation(session, org.org_id).id
    session.commit()
    return conversation_id


def _dispatches(db: Callable[[uuid.UUID], Session], org: OrgHandle, conversation_id: uuid.UUID) -> int:
    session = db(org.org_id)
    rows = session.scalars(
        select(OutboxEvent.id).where(
            OutboxEvent.key == str(conversation_id).encode(), OutboxEvent.topic == "dispatch_requested"
        )
    ).all()
    session.rollback()
    return len(rows)


async def test_a_command_is_stored_dispatched_once_and_audited(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    conversation_id = _conversation(db, org)
    path = f"/api/v1/conversations/{conversation_id}/commands"
    headers = {**org.headers(Role.MANAGER), "Idempotency-Key": "goal-1"}
    sent = await client.post(path, json={"text": "/goal answer every lead --budget 5"}, headers=headers)
    assert sent.status_code == 202, sent.text
    data = sent.json()["data"]
    assert (data["conversation_id"], data["command"]) == (str(conversation_id), "goal")
    # A retry with the same key is the same command, whatever its text says now.
    again = await client.post(path, json={"text": "/loop"}, headers=headers)
    assert again.status_code == 200 and again.json()["data"]["message_id"] == data["message_id"]
    assert again.json()["data"]["command"] == "goal"
    assert _dispatches(db, org, conversation_id) == 1, "a retried request queues nothing twice"

    listed = await client.get(f"/api/v1/conversations/{conversation_id}/messages", headers=org.headers(Role.MANAGER))
    [message] = [m for m in listed.json()["data"] if m["id"] == data["message_id"]]
    assert (message["direction"], message["sender"], message["delivery_status"]) == ("outbound", "human", "received")
    session = db(org.org_id)
    audited = session.scalars(select(AuditLogEntry).where(AuditLogEntry.action == "conversation.command_sent")).one()
    assert audited.details == {"message_id": data["message_id"], "command": "goal"}
    assert audited.actor_user_id is not None


@pytest.mark.parametrize(
    ("text", "status", "code", "reason"),
    [
        ("Oi, tudo bem?", 422, "command_not_supported", None),  # not a command: that is a message
        ("/todo call Maria back", 422, "command_not_supported", None),  # has its own endpoint
        ("/compact", 422, "command_not_supported", None),
        ("/goal answer every lead --budget abc", 422, "command_malformed", "slash_goal_budget_invalid"),
        ("/goal --budget 5", 422, "command_malformed", "slash_goal_text_required"),
        ("/skill:nope", 422, "command_malformed", "slash_skill_unknown"),  # else "unknown skill" in the chat
    ],
)
async def test_what_is_not_a_well_formed_run_command_is_refused_and_nothing_is_dispatched(
    client: httpx.AsyncClient,
    org: OrgHandle,
    db: Callable[[uuid.UUID], Session],
    text: str,
    status: int,
    code: str,
    reason: str | None,
) -> None:
    conversation_id = _conversation(db, org)
    refused = await client.post(
        f"/api/v1/conversations/{conversation_id}/commands", json={"text": text}, headers=org.headers(Role.MANAGER)
    )
    assert refused.status_code == status and refused.json()["error"]["code"] == code, refused.text
    assert refused.json()["error"]["details"].get("reason") == reason
    assert _dispatches(db, org, conversation_id) == 0


async def test_a_conversation_people_own_or_another_orgs_is_refused(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle], db: Callable[[uuid.UUID], Session]
) -> None:
    org, stranger = make_org(), make_org()
    conversation_id = _conversation(db, org)
    session = db(org.org_id)
    session.execute(update(Conversation).where(Conversation.id == conversation_id).values(status="handoff"))
    session.commit()
    path = f"/api/v1/conversations/{conversation_id}/commands"
    body = {"text": "/loop"}
    held = await client.post(path, json=body, headers=org.headers(Role.MANAGER))
    assert held.status_code == 409 and held.json()["error"]["code"] == "conversation_not_open", held.text
    assert held.json()["error"]["details"] == {"status": "handoff"}
    assert (await client.post(path, json=body, headers=stranger.headers())).status_code == 404
    assert (await client.post(path, json=body, headers=org.headers(Role.VIEWER))).status_code == 403
    assert _dispatches(db, org, conversation_id) == 0
