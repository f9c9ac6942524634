"""The business answering from its own phone: a person takes the conversation over, ``/handback`` returns it.

A message the business types on the phone of a connected number to a customer reaches us
as WAHA ``message.any`` with ``fromMe``. When it is neither the echo of a message
Switchboard sent (matched first, ``claim_own_echo``) nor a run command (``/goal`` …), a
person is answering that customer: the agents stop in that conversation, exactly as with
``POST …:takeover`` — status ``handoff`` (no assignee: the phone has no user), the run in
flight interrupted, its reply withheld by the notifier (docs/api.md). Without this the next
customer message went to the agent, which answered over the person.

The owner writes ``/handback`` on the phone, in that chat, to give it back to the agents
(the same as ``POST …:handback``: reopened, agents listening to ``assignment`` woken).
WhatsApp shows the command to the customer like any message the business writes; there is
no other channel from the phone. A customer's ``/handback`` is an ordinary message.

A number other tools also send through (booking reminders, campaigns) turns the takeover
off with the channel session's ``owner_replies_take_over`` (revision 0032): their messages
are not a person answering. ``/handback`` works either way.

Both run inside the webhook's group-commit transaction. The records they queue go to the
outbox at once (``enqueue_record``), so the batch's records added before them are flushed
first: each conversation's records keep the order the deliveries were handled in.
"""

from __future__ import annotations

import hashlib
import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.conversations.service import (
    HANDED_BACK_ACTION,
    VIA_BUSINESS_PHONE,
    NotHandedOff,
    hand_back,
    take_over,
)
from services.api.webhooks import repository
from switchboard.contracts import Serde
from switchboard.db.enums import ConversationStatus
from switchboard.db.lookups import ChannelSessionRoute
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.channels import ChannelSession, Conversation
from switchboard.db.outbox import OutboxBatch
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

TAKEN_OVER = "owner_took_over"
HANDED_BACK = "slash_handback"
HANDBACK_NOTHING = "slash_handback_nothing"


def take_over_from_phone(
    session: Session,
    outbox: OutboxBatch,
    *,
    route: ChannelSessionRoute,
    conversation_id: uuid.UUID,
    body: str,
    serde: Serde,
    request_id: str | None,
) -> bool:
    """Whether the own message just stored took its open conversation over from the agents."""
    enabled = session.scalar(
        select(ChannelSession.owner_replies_take_over).where(
            ChannelSession.org_id == route.org_id, ChannelSession.id == route.channel_session_id
        )
    )
    if not enabled:
        return False
    if repository.sent_recently(session, org_id=route.org_id, conversation_id=conversation_id, body=body):
        # A second copy of our own send (a retry after a lost answer, an echo past the match window).
        log.info(
            "own message repeats a recent send: not a takeover",
            extra={"organization_id": str(route.org_id), "conversation_id": str(conversation_id)},
        )
        return False
    outbox.flush(session)
    take_over(
        session,
        serde,
        org_id=route.org_id,
        conversation_id=conversation_id,
        actor_user_id=None,
        request_id=request_id,
        via=VIA_BUSINESS_PHONE,
    )
    log.info(
        "conversation taken over from the business phone",
        extra={"organization_id": str(route.org_id), "conversation_id": str(conversation_id)},
    )
    return True


def hand_back_from_phone(
    session: Session,
    outbox: OutboxBatch | None,
    *,
    route: ChannelSessionRoute,
    chat_id: str,
    serde: Serde,
    request_id: str | None,
    external_id: str = "",
) -> str:
    """The owner's ``/handback``: the delivery's reason (handed back, or nothing to hand back).

    The command is not stored as a message, so its channel id is kept in the audit entry: a
    redelivery of the same ``/handback`` (WAHA retrying a lost answer) after a person took the
    conversation over again must not hand it back a second time."""
    row = session.execute(
        select(Conversation.id, Conversation.status).where(
            Conversation.org_id == route.org_id,
            Conversation.channel_session_id == route.channel_session_id,
            Conversation.chat_id == chat_id,
        )
    ).one_or_none()
    if row is None or row.status != ConversationStatus.HANDOFF.value:
        return HANDBACK_NOTHING
    if external_id and _handed_back_by(session, route.org_id, row.id, external_id):
        return HANDBACK_NOTHING
    if outbox is not None:
        outbox.flush(session)
    try:
        hand_back(
            session,
            serde,
            org_id=route.org_id,
            conversation_id=row.id,
            actor_user_id=None,
            request_id=request_id,
            via=VIA_BUSINESS_PHONE,
            source_message_id=message_ref(external_id) if external_id else None,
        )
    except NotHandedOff:
        return HANDBACK_NOTHING  # handed back meanwhile (before the row lock): nothing left to do
    log.info(
        "conversation handed back from the business phone",
        extra={"organization_id": str(route.org_id), "conversation_id": str(row.id)},
    )
    return HANDED_BACK


def message_ref(external_id: str) -> str:
    """The channel message's id as the audit keeps it: hashed, because WhatsApp's ids embed the
    customer's number and the audit log is append-only (an erasure could not remove it)."""
    return "sha256:" + hashlib.sha256(external_id.encode()).hexdigest()[:32]


def _handed_back_by(session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID, external_id: str) -> bool:
    """Whether this channel message already handed the conversation back (an audit entry names it)."""
    found = session.scalar(
        select(AuditLogEntry.id)
        .where(
            AuditLogEntry.org_id == org_id,
            AuditLogEntry.action == HANDED_BACK_ACTION,
            AuditLogEntry.target_id == str(conversation_id),
            AuditLogEntry.details["source_message_id"].astext == message_ref(external_id),
        )
        .limit(1)
    )
    return found is not None
