"""Request and response bodies of the conversation endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from switchboard.contracts import WakeContext, WakeReason
from switchboard.db.enums import ConversationStatus


class ConversationView(BaseModel):
    id: uuid.UUID
    channel_session_id: uuid.UUID
    contact_id: uuid.UUID | None
    chat_id: str
    is_group: bool
    status: ConversationStatus = Field(description="`handoff`: humans own it; agents are not dispatched to it")
    assigned_user_id: uuid.UUID | None
    handoff_at: datetime | None = Field(description="When it was last handed to humans")
    last_message_at: datetime | None
    created_at: datetime
    updated_at: datetime


class HandbackResult(ConversationView):
    agent_woken: bool = Field(
        description="True when a dispatch with wake reason `assignment` was queued (agents listening to it run)"
    )


class WakeRequest(BaseModel):
    """``POST /conversations/{id}:wake``: why the agent is woken and the ids that come with it."""

    reason: WakeReason = Field(
        description="Any wake reason but `userMessage` (customer messages are dispatched by ingest)"
    )
    context: WakeContext = Field(
        default_factory=WakeContext,
        description="Ids of the reason: `assignment` assigned_by_user_id (default: the caller), `pipelineStep` "
        "pipeline_run_id, `childCompleted` run_id, `followUp` follow_up_id, `recovery` run_id",
    )
    agent_id: uuid.UUID | None = Field(
        default=None, description="Wake this published agent; by default the agents whose trigger lists the reason"
    )


class WakeResult(BaseModel):
    dispatch_id: uuid.UUID = Field(description="The event id of the queued `dispatch_requested`")
    conversation_id: uuid.UUID
    reason: WakeReason
    context: WakeContext
