"""Waking a conversation's agent for a reason other than a customer message [002 wake reasons].

``POST /api/v1/conversations/{id}:wake`` and the follow-up scheduler both end here: a
``dispatch_requested`` with the wake reason and its context ids is put in the outbox in the
caller's transaction, after the conversation row was locked (outbox writers of one
conversation serialize on it, so its records keep commit order). The dispatcher selects the
agent (the target agent when one is named, else the agents whose trigger lists the reason's
event), the runner records the reason on the run and shows it in the prompt's wake context.

``userMessage`` is refused: a customer message is dispatched by ingest with the message
itself. Functions never commit (the request or the scheduler does).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.channels.service import ensure_number_live
from services.api.conversations import repository
from services.api.core.errors import Conflict, NotFound, ValidationFailed
from switchboard.contracts import DispatchRequested, Serde, Topics, WakeContext, WakeReason
from switchboard.db.audit import record_audit
from switchboard.db.enums import ConversationStatus
from switchboard.db.models import AiAgent, AiAgentRun, ScheduledFollowup
from switchboard.db.models.channels import Conversation
from switchboard.db.models.tenancy import Membership
from switchboard.db.outbox import enqueue_record

# The context ids each reason must carry (the others are optional); ``assignment`` defaults to the caller.
REQUIRED_IDS: Final[Mapping[WakeReason, tuple[str, ...]]] = {
    WakeReason.ASSIGNMENT: ("assigned_by_user_id",),
    WakeReason.PIPELINE_STEP: ("pipeline_run_id",),
    WakeReason.CHILD_COMPLETED: ("run_id",),
    WakeReason.FOLLOW_UP: ("follow_up_id",),
    WakeReason.RECOVERY: ("run_id",),
}


class UserMessageWake(ValidationFailed):
    code = "wake_reason_user_message"
    default_message = "userMessage wakes come from customer messages; use another wake reason"


class WakeContextMissing(ValidationFailed):
    code = "wake_context_missing"
    default_message = "The wake reason needs more context ids"


class WakeContextUnknown(ValidationFailed):
    code = "wake_context_unknown"
    default_message = "A context id does not name a run or follow-up of this conversation"


class NotDispatchable(Conflict):
    code = "conversation_not_dispatchable"
    default_message = "The conversation cannot be woken (handed off to humans, closed, or a group chat)"


def wake_dispatch(
    conversation: Conversation,
    reason: WakeReason,
    context: WakeContext,
    *,
    request_id: str | None,
    target_agent_id: uuid.UUID | None = None,
) -> DispatchRequested:
    """The record that wakes ``conversation`` (it must have a contact: group chats are never dispatched)."""
    assert conversation.contact_id is not None
    return DispatchRequested(
        org_id=conversation.org_id,
        request_id=request_id,
        conversation_id=conversation.id,
        contact_id=conversation.contact_id,
        channel_session_id=conversation.channel_session_id,
        wake_reason=reason,
        wake_context=context,
        target_agent_id=target_agent_id,
    )


def _check_context(
    session: Session, conversation: Conversation, reason: WakeReason, context: WakeContext
) -> WakeContext:
    if reason is WakeReason.USER_MESSAGE:
        raise UserMessageWake()
    missing = [name for name in REQUIRED_IDS[reason] if getattr(context, name) is None]
    if missing:
        raise WakeContextMissing(details={"reason": reason.value, "missing": missing})
    # Ids that name rows of ours must be rows of this conversation (RLS already hides other orgs').
    for field, model in (("run_id", AiAgentRun), ("follow_up_id", ScheduledFollowup)):
        value = getattr(context, field)
        if value is not None and not session.scalar(
            select(model.id).where(
                model.org_id == conversation.org_id, model.id == value, model.conversation_id == conversation.id
            )
        ):
            raise WakeContextUnknown(details={"field": field})
    # Whom the wake names as the assigner: a member of this org (any user id went into the agent's
    # wake context, attributing the assignment to a stranger).
    assigner = context.assigned_by_user_id
    if assigner is not None and not session.scalar(
        select(Membership.user_id).where(Membership.org_id == conversation.org_id, Membership.user_id == assigner)
    ):
        raise WakeContextUnknown(details={"field": "assigned_by_user_id"})
    return context


def wake(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    conversation_id: uuid.UUID,
    reason: WakeReason,
    context: WakeContext,
    agent_id: uuid.UUID | None,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> DispatchRequested:
    """Queue the wake of one conversation (outbox, the caller's transaction) and audit it."""
    row = repository.by_id(session, org_id, conversation_id, for_update=True)
    if row is None:
        raise NotFound("No such conversation")
    ensure_number_live(session, org_id, row.channel_session_id)
    if reason is WakeReason.ASSIGNMENT and context.assigned_by_user_id is None:
        context = context.model_copy(update={"assigned_by_user_id": actor_user_id})
    context = _check_context(session, row, reason, context)
    if row.status != ConversationStatus.OPEN.value or row.is_group or row.contact_id is None:
        raise NotDispatchable(details={"status": row.status, "is_group": row.is_group})
    if agent_id is not None and not session.scalar(
        select(AiAgent.id).where(AiAgent.org_id == org_id, AiAgent.id == agent_id)
    ):
        raise NotFound("No such agent")
    record = wake_dispatch(row, reason, context, request_id=request_id, target_agent_id=agent_id)
    enqueue_record(session, Topics.DISPATCH_REQUESTED, record, serde=serde)
    record_audit(
        session,
        org_id=org_id,
        action="conversation.woken",
        actor_user_id=actor_user_id,
        target_type="conversation",
        target_id=row.id,
        details={"reason": reason.value, "dispatch_id": str(record.event_id), "agent_id": agent_id and str(agent_id)},
        request_id=request_id,
    )
    session.flush()
    return record
