"""Runs that leave a customer without an answer: the humans are told (``conversation.unanswered``).

A run that fails (the provider down after its retries, a revoked key, its process lost
after the last attempt) or is aborted (a step, token or cost budget, a doom loop, the
silence watchdog) sends nothing, and the customer who wrote is left waiting. Nobody would
know but the run table. So the notifier announces it on the org's webhook, once per run,
like a handoff — but it does not take the conversation from the agents: the next message
is answered as usual, and a person decides whether to step in.

Not announced: dry runs; runs with no customer message (scheduled analyses, follow-ups);
an interrupted run and a run handed back at shutdown (another run answers: the
dispatcher carries the messages on or recovers the run); a recovery attempt that found
the messages answered; a run whose classification filter passed the messages to
another agent.
"""

from __future__ import annotations

from typing import Any, Final

from switchboard.contracts import RunCompleted, RunStatus
from switchboard.contracts.enums import ErrorFamily

EVENT_TYPE: Final = "conversation.unanswered"

# ``run_completed.abort_reason`` values of runs whose messages another run answers (the
# runner's services/runner/outcome.py; a unit test keeps the two in step).
ANSWERED_ELSEWHERE: Final = frozenset({"interrupted", "already_answered", "classification_mismatch"})
# ``error_code`` of a run the runner handed back (shutdown, or a newer attempt took it):
# the dispatcher recovers it, so it is not the last word.
HANDED_BACK_CODES: Final = frozenset({"runner_shutdown", "superseded"})


def left_unanswered(completed: RunCompleted) -> bool:
    """Whether this run was the last chance to answer its customer messages, and did not."""
    if completed.dry_run or not completed.message_ids:
        return False
    if completed.status is RunStatus.ABORTED:
        return completed.abort_reason not in ANSWERED_ELSEWHERE
    if completed.status is RunStatus.FAILED:
        handed_back = completed.error_family is ErrorFamily.PROCESS_LOST and completed.error_code in HANDED_BACK_CODES
        return not handed_back
    return False


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
