"""Handing a conversation to humans (a person takes it over) and back to the agents.

The notifier assigned the conversation to humans (``status = handoff``) when a run handed
off; from then on ingest does not dispatch its messages and the dispatcher answers any
dispatch of it with ``conv_busy`` (docs/dispatcher.md, "human_owned"). Handing back reopens
it and, in the same transaction (outbox), queues a ``dispatch_requested`` with wake reason
``assignment``: the dispatcher clears its ``human_owned`` flag on it and wakes the agents
whose trigger listens to ``assignment``.

A person can also take a conversation over without a handoff (after a
``conversation.unanswered`` notice, or to answer a customer themselves): the same
``handoff`` status, assigned to them. Ingest stops dispatching at once; a run already
in flight is asked to stop (a ``steering`` interrupt, in the same transaction: it stops at
its next turn boundary) and the notifier withholds whatever it still sends
(``conversation_with_humans``, docs/notifier.md); a run claimed after the takeover finds
the conversation with humans and is not run (docs/runner.md).
Functions never commit (the request does).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from services.api.channels.service import ensure_number_live
from services.api.conversations import repository
from services.api.core.errors import Conflict, NotFound
from switchboard.contracts import DispatchRequested, Serde, SteeringMessage, Topics, WakeContext, WakeReason
from switchboard.contracts.enums import SteeringKind
from switchboard.db.audit import record_audit
from switchboard.db.enums import ConversationStatus
from switchboard.db.models.channels import Conversation
from switchboard.db.outbox import enqueue_record
from switchboard.internal_chats import is_internal_chat

TAKEOVER_INTERRUPT_TEXT = "A person took the conversation over."
# Where a person took a conversation over or handed it back (the audit entry's ``via``).
VIA_API = "api"
VIA_BUSINESS_PHONE = "business_phone"
# The audit action of a handback (a phone's /handback finds its own entry by it).
HANDED_BACK_ACTION = "conversation.handed_back"


class NotHandedOff(Conflict):
    code = "conversation_not_handed_off"
    default_message = "The conversation is not assigned to humans"


class ConversationClosed(Conflict):
    code = "conversation_closed"
    default_message = "The conversation is closed"


@dataclass(frozen=True)
class HandedBack:
    row: Conversation
    agent_woken: bool


def get_conversation(session: Session, *, org_id: uuid.UUID, conversation_id: uuid.UUID) -> Conversation:
    row = repository.by_id(session, org_id, conversation_id)
    if row is None:
        raise NotFound("No such conversation")
    return row


def take_over(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    conversation_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
    via: str = VIA_API,
) -> Conversation:
    """The caller takes the conversation: ``handoff``, assigned to them. Taking over one
    already handed off assigns it to the caller (claiming it from the team); the handoff
    time is kept, it says when the agents stopped. ``via`` says where the person acted
    (the API, or the business's phone: ``services.api.webhooks.phone``); it is audited."""
    # The runner's claim locks the same row: a run is either claimed before (and found below)
    # or after (and sees the handoff status).
    row = repository.by_id(session, org_id, conversation_id, for_update=True)
    if row is None or is_internal_chat(row.chat_id):
        # An internal conversation (the daily analysis) has no customer to take over from, and is
        # not in the inbox: taken over, it parked the analysis for good (docs/analysis.md).
        raise NotFound("No such conversation")
    if row.status == ConversationStatus.CLOSED.value:
        raise ConversationClosed(details={"status": row.status})
    previous = row.status
    if previous != ConversationStatus.HANDOFF.value:
        row.status = ConversationStatus.HANDOFF.value
        row.handoff_at = datetime.now(UTC)
    interrupted = repository.active_run_id(session, org_id, conversation_id)
    if interrupted is not None:
        enqueue_record(
            session,
            Topics.STEERING,
            SteeringMessage(
                org_id=org_id,
                request_id=request_id,
                conversation_id=conversation_id,
                run_id=interrupted,
                kind=SteeringKind.INTERRUPT,
                text=TAKEOVER_INTERRUPT_TEXT,
            ),
            serde=serde,
        )
    if actor_user_id is not None:  # a token with no person behind it assigns no one
        row.assigned_user_id = actor_user_id
    record_audit(
        session,
        org_id=org_id,
        action="conversation.taken_over",
        actor_user_id=actor_user_id,
        actor_ref=None if via == VIA_API else via,
        target_type="conversation",
        target_id=row.id,
        details={
            "previous_status": previous,
            "interrupted_run_id": str(interrupted) if interrupted else None,
            "via": via,
        },
        request_id=request_id,
    )
    session.flush()
    session.refresh(row)
    return row


def hand_back(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    conversation_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
    via: str = VIA_API,
    source_message_id: str | None = None,
) -> HandedBack:
    row = repository.by_id(session, org_id, conversation_id, for_update=True)
    if row is None:
        raise NotFound("No such conversation")
    if row.status != ConversationStatus.HANDOFF.value:
        raise NotHandedOff(details={"status": row.status})
    ensure_number_live(session, org_id, row.channel_session_id)  # the agents could answer through nothing
    row.status = ConversationStatus.OPEN.value
    row.assigned_user_id = None
    # A group chat has no single contact and is never dispatched: nothing to wake. Nor an internal
    # one (the daily analysis, given back after a handoff parked it): its own schedule wakes it, and
    # an untargeted wake would run a customer-facing agent there, billed, its reply going nowhere.
    wake = row.contact_id is not None and not row.is_group and not is_internal_chat(row.chat_id)
    if wake:
        assert row.contact_id is not None
        enqueue_record(
            session,
            Topics.DISPATCH_REQUESTED,
            DispatchRequested(
                org_id=org_id,
                request_id=request_id,
                conversation_id=row.id,
                contact_id=row.contact_id,
                channel_session_id=row.channel_session_id,
                wake_reason=WakeReason.ASSIGNMENT,
                wake_context=WakeContext(assigned_by_user_id=actor_user_id),
            ),
            serde=serde,
        )
    details: dict[str, object] = {"agent_woken": wake, "via": via}
    if source_message_id:
        details["source_message_id"] = source_message_id  # a phone's /handback: its redelivery finds this entry
    record_audit(
        session,
        org_id=org_id,
        action=HANDED_BACK_ACTION,
        actor_user_id=actor_user_id,
        actor_ref=None if via == VIA_API else via,
        target_type="conversation",
        target_id=row.id,
        # The channel message that asked (a phone's /handback): a redelivery of it finds this entry.
        details={
            "agent_woken": wake,
            "via": via,
            **({"source_message_id": source_message_id} if source_message_id else {}),
        },
        request_id=request_id,
    )
    session.flush()
    session.refresh(row)  # server-side updated_at, loaded here: the view is built outside the session
    return HandedBack(row=row, agent_woken=wake)
