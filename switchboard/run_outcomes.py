"""What a ``run_completed`` means for the customer who wrote: read by the notifier and the brief.

Two questions every consumer of run outcomes asks, answered once:

- **Was it handed back?** A runner stopped mid-run (a rolling deploy) closes the run as
  ``processLost`` with ``runner_shutdown`` and announces it; the dispatcher recovers its
  messages at once in a new attempt. It is spend, not a run anyone should count or chase.
- **Was the customer left unanswered?** A run that failed (the provider down after its
  retries, a revoked key, its process lost after the last attempt) or was aborted (a step,
  token or cost budget, a doom loop, the silence watchdog) sent nothing, and it was the last
  chance for its customer messages. Not: dry runs; runs with no customer message (scheduled
  analyses, follow-ups); runs whose messages another run answers — an interrupted run (the
  next run takes its messages), a handed-back or superseded run (recovered), a recovery
  attempt that found the messages answered, a run whose classification filter passed them
  to another agent, a run not run because a person had taken the conversation over.

The codes are the runner's (``services/runner/outcome.py``); a unit test keeps them in step.
"""

from __future__ import annotations

from typing import Final

from switchboard.contracts import RunCompleted, RunStatus
from switchboard.contracts.enums import ErrorFamily

# ``run_completed.abort_reason`` of a run not run because people own its conversation (a
# person took it over): the people answer. Also the delivery error of a reply the notifier
# withheld for the same reason.
WITH_HUMANS: Final = "conversation_with_humans"
# A delivery that failed before any attempt: a notifier stopped (or crashed) while the message
# waited its turn behind a retry (revision 0040). Certainly not sent: people may send it again,
# and a person typing it on the phone writes their own message, not an echo of ours.
NOT_ATTEMPTED: Final = "interrupted_before_send"
# ``run_completed.abort_reason`` of a run stopped by a steering interrupt (the dispatcher's,
# for a newer message, or a takeover's).
INTERRUPTED: Final = "interrupted"
# ``run_completed.abort_reason`` of a run not run because its contact was erased (requested
# before the erasure, claimed after it): nobody is to be answered, nothing is to be written.
CONTACT_ERASED: Final = "contact_erased"
# The delivery error of a message a lost run queued and its recovery attempt withdrew (and the
# error of a follow-up it withdrew; services/runner/superseded.py): never sent, so never shown
# to a model as said — the runner's history, its summaries and the history tool leave it out.
WITHDRAWN_RUN_LOST: Final = "withdrawn_run_lost"
# ``run_completed.abort_reason`` of runs whose messages another run (or the people) answers, or
# that nobody is to answer any more.
ANSWERED_ELSEWHERE: Final = frozenset(
    {INTERRUPTED, "already_answered", "classification_mismatch", WITH_HUMANS, CONTACT_ERASED}
)
# ``error_code`` of a run its runner handed back at a stop (a rolling deploy, a scale-down).
RUNNER_SHUTDOWN: Final = "runner_shutdown"
# ``error_code`` of a run its runner handed back: the dispatcher recovers it.
HANDED_BACK_CODES: Final = frozenset({RUNNER_SHUTDOWN, "superseded"})


def handed_back(completed: RunCompleted) -> bool:
    """The runner gave the run back (shutdown, or a newer attempt took it): another attempt answers."""
    return (
        completed.status is RunStatus.FAILED
        and completed.error_family is ErrorFamily.PROCESS_LOST
        and completed.error_code in HANDED_BACK_CODES
    )


def left_unanswered(completed: RunCompleted) -> bool:
    """Whether this run was the last chance to answer its customer messages, and did not."""
    if completed.dry_run or not completed.message_ids:
        return False
    if completed.status is RunStatus.ABORTED:
        return completed.abort_reason not in ANSWERED_ELSEWHERE
    return completed.status is RunStatus.FAILED and not handed_back(completed)
