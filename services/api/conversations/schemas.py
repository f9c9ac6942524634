"""Request and response bodies of the conversation endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.api.contacts.schemas import ContactSummary
from switchboard.contracts import WakeContext, WakeReason
from switchboard.db.enums import ConversationStatus


class ConversationView(BaseModel):
    id: uuid.UUID
    channel_session_id: uuid.UUID
    contact_id: uuid.UUID | None
    contact: ContactSummary | None = Field(description="Who it is with (null for a group chat); edit at /contacts")
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


class SendCommand(BaseModel):
    """A command of the business's to the conversation's agent (``/plan``, ``/goal``, ``/loop``, ``/skill:``)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=4096, description="The command as it would be typed, e.g. /goal …")


class CommandResult(BaseModel):
    """The command went to the agent (not to the customer): stored as ``message_id``, dispatched."""

    conversation_id: uuid.UUID
    message_id: uuid.UUID
    command: str  # plan | goal | loop | skill


class SendMessage(BaseModel):
    """A person's message to the customer of a conversation handed to humans."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=4096, description="What the customer receives, as written")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


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


class MessageView(BaseModel):
    """One message of a conversation, as stored (inbound from the customer, outbound from an agent or a person)."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    direction: str = Field(description="`inbound` or `outbound`")
    sender: str = Field(description="`contact`, `agent`, `human` or `system`")
    body: str
    content_type: str
    from_me: bool
    delivery_status: str
    delivery_error: str | None = Field(
        default=None,
        description="Why an outbound message was not delivered: the channel's code (`http_400`, `timeout`…), or "
        "`conversation_with_humans` — a run ended after a person took the conversation over, so its reply was "
        "kept here and not sent",
    )
    run_id: uuid.UUID | None = Field(description="The run that wrote an agent's message")
    occurred_at: datetime
    created_at: datetime


class DecisionView(BaseModel):
    """One decision of the dispatcher: why a message started a run, waited, or got no answer."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    outcome: str = Field(
        description="`dispatched`, `no_match`, `conv_busy`, `budget_exceeded`, `rate_limited`, `queued`, `steered`, …"
    )
    conversation_id: uuid.UUID | None
    inbound_message_id: uuid.UUID | None
    agent_id: uuid.UUID | None
    agent_version_id: uuid.UUID | None
    run_id: uuid.UUID | None
    wake_reason: str
    is_dry_run: bool
    details: dict[str, Any] = Field(description="Candidates considered, the filter that rejected them, the busy run…")
    created_at: datetime
