"""The business's commands to the agent of a conversation, sent from Switchboard instead of the chat.

``/plan``, ``/goal``, ``/loop`` and ``/skill:`` are the business's (docs/agent-context.md "Who
may command the agent"). Until now the owner could only type them from the business phone into
the customer's chat — where WhatsApp shows them to the customer ("/goal upsell --budget 20").
Here the same command goes to the agent without passing through the chat: in one transaction
the command is stored as the business's message (outbound, sender ``human``, never sent: its
status stays ``received``, ``attributes.command = "api"``) and a ``dispatch_requested`` marked
``from_me`` is queued — exactly what ingest does for a command typed on the phone, so the
dispatcher and the runner treat both alike. What the agent then answers goes to the customer
as any reply does.

Refused with stable codes: a text that is not one of those commands (``422
command_not_supported``; ``/todo`` and ``/compact`` have endpoints of their own), a malformed
one (``422 command_malformed``, the parser's code in ``details.reason``, e.g.
``slash_goal_budget_invalid``), a conversation
that is not the agents' right now (``409 conversation_not_open``: people own it, or it is
closed), a group (``409 conversation_is_group``). Functions never commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.api.conversations import repository
from services.api.core.errors import Conflict, NotFound, ValidationFailed
from switchboard.contracts import DispatchRequested, InboundMessage, Serde, Topics, WakeContext
from switchboard.contracts.enums import WakeReason
from switchboard.db.audit import record_audit
from switchboard.db.enums import ConversationStatus, MessageDeliveryStatus, MessageDirection, MessageSender
from switchboard.db.models.channels import Message
from switchboard.db.models.slash import AgentSkill
from switchboard.db.outbox import enqueue_record
from switchboard.internal_chats import is_internal_chat
from switchboard.slash_commands import API_COMMAND_EXTERNAL_ID_PREFIX, RUN_COMMANDS, ParseError, parse

DEDUPE_PREFIX = "command:"
EXTERNAL_ID_PREFIX = API_COMMAND_EXTERNAL_ID_PREFIX
# The dispatch of a stored command is derived from its message: a retry queues nothing twice.
DISPATCH_NAMESPACE = uuid.UUID("8a0c5f3e-4b1d-4f57-9a8e-2f6b1c0d7e31")


class CommandNotSupported(ValidationFailed):
    code = "command_not_supported"


class MalformedCommand(ValidationFailed):
    """A known command written wrongly: the parser's message, its stable code in ``details.reason``
    (``slash_goal_budget_invalid``...)."""

    code = "command_malformed"

    def __init__(self, error: ParseError) -> None:
        super().__init__(error.message, details={"field": "text", "reason": error.code})


class ConversationNotOpen(Conflict):
    code = "conversation_not_open"
    default_message = "The conversation is not the agents' right now"


class ConversationIsGroup(Conflict):
    code = "conversation_is_group"
    default_message = "Agents do not answer group chats"


@dataclass(frozen=True)
class CommandSent:
    message_id: uuid.UUID
    command: str
    created: bool  # False: an earlier request with the same Idempotency-Key sent it


def send_command(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    conversation_id: uuid.UUID,
    text: str,
    actor_user_id: uuid.UUID | None,
    idempotency_key: str | None,
    request_id: str | None,
) -> CommandSent:
    command, skill = _run_command(text)
    if skill is not None and not _skill_exists(session, org_id, skill):
        # The runner would answer "unknown skill" into the customer's chat: say it here instead.
        raise MalformedCommand(
            ParseError("slash_skill_unknown", f"No skill is called {skill!r} (GET /api/v1/skills lists them).")
        )
    conversation = repository.by_id(session, org_id, conversation_id, for_update=True)
    if conversation is None or is_internal_chat(conversation.chat_id):
        raise NotFound("No such conversation")
    dedupe_key = f"{DEDUPE_PREFIX}{conversation.id}:{idempotency_key or uuid.uuid4()}"
    existing = repository.message_by_dedupe_key(session, org_id, conversation.channel_session_id, dedupe_key)
    if existing is not None:
        # The command stored then, whatever this retry's text says.
        return CommandSent(existing.id, _run_command(existing.body)[0], created=False)
    if conversation.chat_id.endswith("@g.us") or conversation.contact_id is None:
        raise ConversationIsGroup()
    if conversation.status != ConversationStatus.OPEN.value:
        raise ConversationNotOpen(details={"status": conversation.status})
    now = datetime.now(UTC)
    message_id = uuid.uuid4()
    session.execute(
        insert(Message).values(
            id=message_id,
            org_id=org_id,
            conversation_id=conversation.id,
            channel_session_id=conversation.channel_session_id,
            direction=MessageDirection.OUTBOUND.value,
            sender=MessageSender.HUMAN.value,
            sent_by_user_id=actor_user_id,
            dedupe_key=dedupe_key,
            # Its own id: ingest's echo matching only takes unidentified outbound rows, so the same
            # command typed on the phone later is not mistaken for this one's echo.
            external_id=f"{EXTERNAL_ID_PREFIX}{message_id}",
            body=text,
            from_me=True,
            delivery_status=MessageDeliveryStatus.RECEIVED.value,  # never sent: the customer does not see it
            occurred_at=now,
            attributes={"command": "api"},
        )
    )
    enqueue_record(
        session,
        Topics.DISPATCH_REQUESTED,
        DispatchRequested(
            event_id=uuid.uuid5(DISPATCH_NAMESPACE, str(message_id)),
            org_id=org_id,
            request_id=request_id or None,
            conversation_id=conversation.id,
            contact_id=conversation.contact_id,
            channel_session_id=conversation.channel_session_id,
            wake_reason=WakeReason.USER_MESSAGE,
            wake_context=WakeContext(message_id=message_id),
            message=InboundMessage(
                message_id=message_id,
                external_id=f"{EXTERNAL_ID_PREFIX}{message_id}",
                chat_id=conversation.chat_id,
                text=text,
                received_at=now,
                from_me=True,  # the business's: what lets the runner act on it
                is_group=False,
            ),
            dry_run=False,
        ),
        serde=serde,
    )
    record_audit(
        session,
        org_id=org_id,
        action="conversation.command_sent",
        actor_user_id=actor_user_id,
        target_type="conversation",
        target_id=conversation.id,
        details={"message_id": str(message_id), "command": command},
        request_id=request_id,
    )
    return CommandSent(message_id, command, created=True)


def _skill_exists(session: Session, org_id: uuid.UUID, name: str) -> bool:
    return session.scalar(select(AgentSkill.id).where(AgentSkill.org_id == org_id, AgentSkill.name == name)) is not None


def _run_command(text: str) -> tuple[str, str | None]:
    """The command's name (and skill) when ``text`` is a well-formed run command; a stable 422 otherwise."""
    try:
        parsed = parse(text)
    except ParseError as exc:
        raise MalformedCommand(exc) from None
    if parsed is None or parsed.name not in RUN_COMMANDS:
        raise CommandNotSupported(
            "Send /plan, /goal, /loop or /skill:<name> (a to-do goes to POST /api/v1/home/todos)",
            details={"field": "text", "supported": sorted(f"/{name.value}" for name in RUN_COMMANDS)},
        )
    return parsed.name.value, parsed.skill
