"""A person answering the customer from Switchboard, in a conversation handed to humans.

The handoff gave the conversation to people (``status = handoff``); they could answer only
from the business's phone. Here one answers from the platform: in one transaction the
message is stored (outbound, sender ``human``, ``sent_by_user_id``, ``pending``), the
conversation is assigned to the writer when nobody has it, the audit log says who wrote,
and a ``human_messages`` record is queued (outbox); the notifier sends it once, through the
same at-most-once claim as an agent's reply, and records the outcome on the message.

Only in ``handoff`` (409 otherwise): an open conversation belongs to the agents, and a
person writing into it while a run answers would cross the run's reply. Hand it back with
``:handback`` when done. An ``Idempotency-Key`` makes a retried request the same message
(the stored one is answered again, nothing is sent twice). Functions never commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.api.channels.service import ensure_number_live
from services.api.conversations import repository
from services.api.conversations.service import NotHandedOff
from services.api.core.errors import NotFound
from switchboard.contracts import HumanMessageRequested, Serde, Topics
from switchboard.db.audit import record_audit
from switchboard.db.enums import ConversationStatus, MessageDeliveryStatus, MessageDirection, MessageSender
from switchboard.db.models.channels import Message
from switchboard.db.outbox import enqueue_record
from switchboard.internal_chats import is_internal_chat

DEDUPE_PREFIX = "human:"


@dataclass(frozen=True)
class Sent:
    message: Message
    created: bool  # False: an earlier request with the same Idempotency-Key stored it


def send_human_message(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    conversation_id: uuid.UUID,
    text: str,
    actor_user_id: uuid.UUID | None,
    idempotency_key: str | None,
    request_id: str | None,
) -> Sent:
    conversation = repository.by_id(session, org_id, conversation_id, for_update=True)
    if conversation is None or is_internal_chat(conversation.chat_id):
        raise NotFound("No such conversation")  # an internal one has nobody to write to (not in the inbox)
    dedupe_key = f"{DEDUPE_PREFIX}{conversation.id}:{idempotency_key or uuid.uuid4()}"
    existing = repository.message_by_dedupe_key(session, org_id, conversation.channel_session_id, dedupe_key)
    if existing is not None:
        return Sent(existing, created=False)
    if conversation.status != ConversationStatus.HANDOFF.value:
        raise NotHandedOff(details={"status": conversation.status})
    ensure_number_live(session, org_id, conversation.channel_session_id)
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
            body=text,
            delivery_status=MessageDeliveryStatus.PENDING.value,
        )
    )
    if conversation.assigned_user_id is None and actor_user_id is not None:
        conversation.assigned_user_id = actor_user_id
    enqueue_record(
        session,
        Topics.HUMAN_MESSAGES,
        HumanMessageRequested(
            org_id=org_id,
            request_id=request_id or None,
            conversation_id=conversation.id,
            channel_session_id=conversation.channel_session_id,
            chat_id=conversation.chat_id,
            message_id=message_id,
            sent_by_user_id=actor_user_id,
        ),
        serde=serde,
    )
    record_audit(
        session,
        org_id=org_id,
        action="conversation.message_sent",
        actor_user_id=actor_user_id,
        target_type="conversation",
        target_id=conversation.id,
        details={"message_id": str(message_id), "characters": len(text)},  # never the text: a customer's chat
        request_id=request_id,
    )
    session.flush()
    row = session.get(Message, message_id)
    assert row is not None
    session.refresh(row)
    return Sent(row, created=True)
