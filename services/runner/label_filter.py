"""Classification labels in trigger filters (issue 6 item 9; docs/agent-context.md "Classification").

A version's ``trigger_config.classification`` lists the labels it answers, per label
(``{"category": ["billing"], "urgency": ["high", "urgent"]}``; an absent or empty list means
any value). The dispatcher chooses an agent before any label exists, so the runner checks the
filter right after classifying: when it is unmet the run ends without a model loop
(``classification_mismatch``) and its messages are dispatched again with this agent, and every
agent that already refused them, in ``excluded_agent_ids``: the next matching agent answers,
each agent is tried at most once, and with none left the dispatcher records ``no_match``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final

from services.runner.classification import MessageLabels
from services.runner.outcome import CLASSIFICATION_MISMATCH
from switchboard.contracts import DispatchRequested, RunRequested, WakeContext, WakeReason

__all__ = ["CLASSIFICATION_MISMATCH", "filter_mismatch", "redispatches"]

FILTER_KEYS: Final = ("intent", "urgency", "category", "tone")
# Derives the re-dispatch's event id from (run, message): a retried finish enqueues the same records.
REDISPATCH_NAMESPACE: Final = uuid.UUID("6f1c2a7e-3b9d-4e55-9a51-0c8e2f7d4b10")


def filter_mismatch(trigger_filter: Mapping[str, Any] | None, labels: MessageLabels) -> str | None:
    """``"<label>:<value>"`` for the first label outside the filter; None when the filter is met."""
    values = labels.as_json()
    for key in FILTER_KEYS:
        allowed = (trigger_filter or {}).get(key) or ()
        if allowed and values[key] not in allowed:
            return f"{key}:{values[key]}"
    return None


def redispatches(request: RunRequested, excluded: Iterable[uuid.UUID]) -> tuple[DispatchRequested, ...]:
    """The run's messages dispatched again, excluding ``excluded`` (this run's agent included)."""
    excluded_ids = tuple(sorted({*excluded, request.agent_id}, key=str))
    return tuple(
        DispatchRequested(
            event_id=uuid.uuid5(REDISPATCH_NAMESPACE, f"{request.run_id}:{message.message_id}"),
            org_id=request.org_id,
            request_id=request.request_id,
            conversation_id=request.conversation_id,
            contact_id=request.contact_id,
            channel_session_id=request.channel_session_id,
            wake_reason=WakeReason.USER_MESSAGE,
            wake_context=WakeContext(message_id=message.message_id, run_id=request.run_id),
            message=message,
            excluded_agent_ids=excluded_ids,
        )
        for message in request.messages
    )
