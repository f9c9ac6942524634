"""How a run ended, and how that reads as status, vitality and error family [002].

``status`` is coarse and drives other state machines; ``vitality`` and
``error_family`` say what really happened. ``completed`` never claims the reply
was delivered: a run that ends without a reply is ``completed`` / ``empty`` /
``silentRun`` and its summary says so.

| outcome                                   | status    | vitality   | error family      |
| ----------------------------------------- | --------- | ---------- | ----------------- |
| model answered (tools used or not)        | completed | completed / productive | -      |
| model stopped without text                | completed | empty      | silentRun         |
| ``finish`` tool                           | completed | completed  | -                 |
| handoff by keyword or tool                | handoff   | blocked    | -                 |
| handoff because the tool server is down   | handoff   | blocked    | toolFailure       |
| max_steps / token / cost budget           | aborted   | stalled    | budgetExceeded    |
| doom loop (> 5 identical calls)           | aborted   | looping    | -                 |
| silence watchdog                          | aborted   | stalled    | silentRun         |
| interrupt from steering                   | aborted   | alive      | -                 |
| paused on a proposal, awaiting approval   | aborted   | blocked    | -                 |
| people own the conversation (not run)     | aborted   | completed  | -                 |
| provider errors after retries             | failed    | failed     | transientUpstream |
| invalid / revoked key, bad request, bug   | failed    | failed     | unknown           |
| handed back at shutdown                   | failed    | dead       | processLost       |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from services.runner.providers.base import TokenUsage
from switchboard import run_outcomes
from switchboard.contracts.enums import ErrorFamily, HandoffTrigger, RunStatus, Urgency, Vitality
from switchboard.db.enums import AWAITING_APPROVAL


class OutcomeKind(StrEnum):
    ANSWERED = "answered"
    FINISHED = "finished"
    HANDOFF = "handoff"
    ABORTED = "aborted"
    FAILED = "failed"
    HANDED_BACK = "handed_back"


# Error codes of a run handed back to the dispatcher, which recovers it (``run_completed.error_code``).
RUNNER_SHUTDOWN = run_outcomes.RUNNER_SHUTDOWN
SUPERSEDED = "superseded"


# A recovery attempt whose messages an earlier attempt already answered (its late run_completed
# raced the lease): nothing is run, nothing is sent — one reply per message (docs/runner.md).
ALREADY_ANSWERED = "already_answered"
# The version's classification filter refused the messages; they went to the next agent
# (services/runner/label_filter.py, docs/agent-context.md).
CLASSIFICATION_MISMATCH = "classification_mismatch"
# The conversation was ``handoff`` when the run was claimed (a person took it over after the
# run was requested): nothing is run, the people answer (``switchboard.run_outcomes``).
WITH_HUMANS = run_outcomes.WITH_HUMANS
CONTACT_ERASED = run_outcomes.CONTACT_ERASED


# Abort reasons (``ai_agent_runs.abort_reason``, ``run_completed.abort_reason``).
INTERRUPTED = run_outcomes.INTERRUPTED
SILENCE_TIMEOUT = "silence_timeout"
LOOPING = "looping"
# The model's answer reached the step's output cap: cut off (or all thinking, no answer).
OUTPUT_LIMIT_REACHED = "output_limit_reached"
# The provider withheld the answer (refusal, content or safety filter): nothing is sent.
ANSWER_REFUSED = "answer_refused"
HANDED_BACK = "handed_back"
# A handoff in an internal conversation (the daily analysis): nobody would answer it.
HANDOFF_UNAVAILABLE = "handoff_unavailable"


@dataclass(frozen=True, slots=True)
class RunFailure:
    code: str
    message: str
    family: ErrorFamily


@dataclass(frozen=True, slots=True)
class HandoffRequest:
    reason: str
    urgency: Urgency
    trigger: HandoffTrigger
    matched_keyword: str | None = None
    # Set when the handoff replaces a failure (tool server down [004 R6]).
    failure: RunFailure | None = None


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A tool call the run made, with whether it failed (actions are derived from these)."""

    call_id: str
    tool_name: str
    arguments_json: str
    is_error: bool


@dataclass(frozen=True, slots=True)
class LoopOutcome:
    kind: OutcomeKind
    final_text: str | None = None
    abort_reason: str | None = None
    failure: RunFailure | None = None
    handoff: HandoffRequest | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_micros: int = 0
    steps: int = 0
    tool_calls: int = 0
    summary: str | None = None
    calls: tuple[CallRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class Classification:
    status: RunStatus
    vitality: Vitality
    error_family: ErrorFamily | None


_ABORT_FAMILIES = {
    "max_steps_reached": (Vitality.STALLED, ErrorFamily.BUDGET_EXCEEDED),
    "token_budget_exceeded": (Vitality.STALLED, ErrorFamily.BUDGET_EXCEEDED),
    "cost_budget_exceeded": (Vitality.STALLED, ErrorFamily.BUDGET_EXCEEDED),
    OUTPUT_LIMIT_REACHED: (Vitality.STALLED, ErrorFamily.BUDGET_EXCEEDED),
    ANSWER_REFUSED: (Vitality.BLOCKED, None),
    HANDOFF_UNAVAILABLE: (Vitality.BLOCKED, None),
    LOOPING: (Vitality.LOOPING, None),
    SILENCE_TIMEOUT: (Vitality.STALLED, ErrorFamily.SILENT_RUN),
    INTERRUPTED: (Vitality.ALIVE, None),
    # Nothing went wrong: the run waits for the owner's decision (services/runner/autonomy.py), as a
    # handoff waits for people — blocked, not stalled, and no error family.
    AWAITING_APPROVAL: (Vitality.BLOCKED, None),
    ALREADY_ANSWERED: (Vitality.COMPLETED, None),
    CLASSIFICATION_MISMATCH: (Vitality.COMPLETED, None),
    WITH_HUMANS: (Vitality.COMPLETED, None),
    CONTACT_ERASED: (Vitality.COMPLETED, None),
}


def classify(outcome: LoopOutcome) -> Classification:
    """Status, vitality and error family of an outcome (see the table above)."""
    kind = outcome.kind
    if kind is OutcomeKind.ANSWERED:
        if not (outcome.final_text or "").strip():
            return Classification(RunStatus.COMPLETED, Vitality.EMPTY, ErrorFamily.SILENT_RUN)
        vitality = Vitality.PRODUCTIVE if outcome.tool_calls else Vitality.COMPLETED
        return Classification(RunStatus.COMPLETED, vitality, None)
    if kind is OutcomeKind.FINISHED:
        return Classification(RunStatus.COMPLETED, Vitality.COMPLETED, None)
    if kind is OutcomeKind.HANDOFF:
        failure = outcome.handoff.failure if outcome.handoff else None
        return Classification(RunStatus.HANDOFF, Vitality.BLOCKED, failure.family if failure else None)
    if kind is OutcomeKind.ABORTED:
        vitality, family = _ABORT_FAMILIES.get(outcome.abort_reason or "", (Vitality.STALLED, ErrorFamily.UNKNOWN))
        return Classification(RunStatus.ABORTED, vitality, family)
    if kind is OutcomeKind.HANDED_BACK:
        return Classification(RunStatus.FAILED, Vitality.DEAD, ErrorFamily.PROCESS_LOST)
    family = outcome.failure.family if outcome.failure else ErrorFamily.UNKNOWN
    return Classification(RunStatus.FAILED, Vitality.FAILED, family)
