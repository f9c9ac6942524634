"""What a run is about, loaded once at its start: the request, the agent version, the conversation.

Plain frozen dataclasses (no ORM objects leave the store), so context builders
and tests never touch the database.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.runner.attachments import model_text
from switchboard.contracts import RunRequested
from switchboard.slash_commands import API_COMMAND_EXTERNAL_ID_PREFIX
from switchboard.tool_catalog import FOLLOWUP_CREATION_TOOLS, REQUEST_HUMAN_HANDOFF


@dataclass(frozen=True, slots=True)
class VersionConfig:
    """The columns of ``ai_agent_versions`` the runtime uses."""

    id: uuid.UUID
    agent_id: uuid.UUID
    version_number: int
    system_prompt: str
    provider: str
    model: str
    credential_id: uuid.UUID | None
    tool_ids: tuple[str, ...]
    max_steps: int
    token_budget: int
    cost_budget_micros: int
    history_message_window: int
    history_token_window: int
    handoff_keywords: tuple[str, ...]
    handoff_tool_enabled: bool
    followup: dict[str, Any] = field(default_factory=dict)
    persona: str | None = None
    skills: tuple[str, ...] = ()
    channel_session_id: uuid.UUID | None = None
    # The version's silence watchdog [002]; None: the process default (RUNNER_SILENCE_TIMEOUT_S).
    silence_timeout_minutes: int | None = None
    # Issue 6 item 9 (docs/agent-context.md): agents this version may delegate to; classify first.
    subagent_ids: tuple[uuid.UUID, ...] = ()
    classification_enabled: bool = False
    # What the customer is told when a run hands off (docs/notifier.md "Handoffs"); None: nothing.
    handoff_message: str | None = None

    def silence_timeout_s(self, default_s: float) -> float:
        """The version's silence timeout wins over the process default."""
        return default_s if self.silence_timeout_minutes is None else self.silence_timeout_minutes * 60.0

    @property
    def callbacks_enabled(self) -> bool:
        """``followup.callback_enabled``; absent means enabled (legacy behavior [004 §4.4])."""
        return bool(self.followup.get("callback_enabled", True))

    def granted_tools(self) -> tuple[str, ...]:
        """Exactly the tools this version may offer: its ``tool_ids``, plus the handoff tool when
        enabled, minus follow-up creation when callbacks are off. Order kept, no duplicates."""
        names = list(self.tool_ids)
        if self.handoff_tool_enabled and REQUEST_HUMAN_HANDOFF not in names:
            names.append(REQUEST_HUMAN_HANDOFF)
        if not self.callbacks_enabled:
            names = [n for n in names if n not in FOLLOWUP_CREATION_TOOLS]
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    id: uuid.UUID
    chat_id: str
    channel_session_id: uuid.UUID
    contact_name: str | None = None
    summary: str | None = None
    # The newest message the summary covers (occurred_at, id): the history leaves out what it stands for.
    summary_through: tuple[datetime, uuid.UUID] | None = None


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """A past message of the conversation: ``inbound`` from the customer, ``outbound`` to them."""

    message_id: uuid.UUID
    direction: str
    text: str
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class RunSubject:
    request: RunRequested
    agent_name: str
    version: VersionConfig
    conversation: ConversationInfo | None
    # The conversation's latest messages, newest first, loaded with the subject (one transaction).
    recent_messages: tuple[HistoryItem, ...] = ()
    # Context the readers read in the same transaction, by their key (services/runner/preload.py).
    preloaded: Mapping[str, object] = field(default_factory=dict)

    @property
    def inbound_text(self) -> str:
        """The customer messages this run answers, oldest first, as the model reads them
        (an attachment is a note of what was sent: ``attachments.model_text``)."""
        texts = (model_text(m.content_type.value, m.text) for m in self.request.messages)
        return "\n".join(t for t in texts if t)

    @property
    def command_via_api(self) -> bool:
        """The business sent this run's command through the API, not into the customer's chat: the
        customer never saw it, so a fixed acknowledgement ("Stopped the autonomous work.") is not
        theirs to receive either."""
        messages = self.request.messages
        return bool(messages) and all(
            m.from_me and m.external_id.startswith(API_COMMAND_EXTERNAL_ID_PREFIX) for m in messages
        )

    @property
    def command_text(self) -> str | None:
        """The text slash commands are read from, or None when this run's messages may not command.

        Commands (``/plan``, ``/goal`` with its budget, ``/loop``, ``/skill:``) are the business's:
        the owner writing from the business phone (``from_me``) or testing a version (a dry run).
        A customer's ``/goal --budget 500`` is plain text to the agent — a customer must not
        start billed autonomous work or switch the conversation's mode (docs/agent-context.md)."""
        messages = self.request.messages
        if self.request.dry_run or (messages and all(m.from_me for m in messages)):
            return "\n".join(m.text for m in messages if m.text)
        return None
