"""Runs that leave a customer without an answer: the humans are told (``conversation.unanswered``).

Which runs those are is the shared rule (``switchboard.run_outcomes.left_unanswered``). Nobody
would know but the run table, so the notifier announces each on the org's webhook, once per
run, like a handoff — but it does not take the conversation from the agents: the next
message is answered as usual, and a person decides whether to step in (``:takeover``).
"""

from __future__ import annotations

from typing import Any, Final

from switchboard.contracts import RunCompleted

EVENT_TYPE: Final = "conversation.unanswered"


def dedupe_key(completed: RunCompleted) -> str:
    return f"unanswered:{completed.run_id}"


def payload(completed: RunCompleted) -> dict[str, Any]:
    """What the humans need to find the conversation and see why; never the error message
    (it can quote an upstream's answer) nor the customer's text."""
    return {
        "conversation_id": str(completed.conversation_id),
        "contact_id": str(completed.contact_id),
        "channel_session_id": str(completed.channel_session_id),
        "run_id": str(completed.run_id),
        "agent_id": str(completed.agent_id),
        "attempt": completed.attempt,
        "status": completed.status.value,
        "vitality": completed.vitality.value,
        "error_family": None if completed.error_family is None else completed.error_family.value,
        "error_code": completed.error_code,
        "abort_reason": completed.abort_reason,
        "unanswered_messages": len(completed.message_ids),
    }
