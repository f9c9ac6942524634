"""``/compact``: compact the thread summary now, without an agent turn [002 "I comandi slash"].

Ingest (``services/api/webhooks/slash.py``) never stores ``/compact`` as a message; it
outboxes a ``run_requested`` whose ``request_id`` starts with ``slash:compact:`` for the
agent version that last ran in the conversation. The runner claims it like any run (so a
redelivery is skipped, the conversation's other run is waited for, and the run is visible
in the run log), then — instead of the loop — folds **every** message the summary does not
cover yet into it, the recent window included, through ``ThreadSummarizer.summarize`` (the
same provider, key, pseudonymization and storage as the background job). The run ends
``completed`` with no final text and nothing is sent: its summary says what was compacted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from services.runner.outcome import LoopOutcome, OutcomeKind, RunFailure
from services.runner.providers.base import ProviderAccess, ProviderError
from services.runner.subject import RunSubject
from services.runner.summary import SpendTally, SummaryJob, ThreadSummarizer
from switchboard.contracts.enums import ErrorFamily

# Each pass folds at most summary.MAX_BATCH_MESSAGES messages; a very long thread takes several.
MAX_PASSES: Final = 10


class Compactor:
    def __init__(self, summarizer: ThreadSummarizer) -> None:
        self._summarizer = summarizer

    async def __call__(self, subject: RunSubject, access: ProviderAccess | None) -> LoopOutcome:
        if subject.conversation is None or subject.request.dry_run:
            return LoopOutcome(OutcomeKind.FINISHED, summary="/compact: nothing to compact (no conversation).")
        # A window of zero messages: everything newer than the summary's coverage is "older than the window".
        everything = replace(subject, version=replace(subject.version, history_message_window=0))
        # The calls are this run's work: their spend is the run's (its row, run_completed, the agent's
        # budget), and the version's cost budget stops further passes once reached.
        tally = SpendTally()
        job = SummaryJob(everything, access, tally=tally)
        version = subject.version
        budget = version.cost_budget_micros
        passes = 0

        def within_budgets() -> bool:
            # The version's budgets as for any run: its cost, its tokens, its steps (a pass is a step).
            spent_tokens = tally.usage.all_input + tally.usage.output_tokens
            return (
                passes < min(MAX_PASSES, version.max_steps)
                and tally.cost_micros < budget
                and spent_tokens < version.token_budget
            )

        try:
            while within_budgets() and await self._summarizer.summarize(job):
                passes += 1
        except Exception as exc:
            # A pass failed (the provider refused, the database went away): what the passes before
            # it — and its own call, when billed — spent is still the run's (it was recorded as 0).
            code = exc.code if isinstance(exc, ProviderError) else "compaction_failed"
            failure = RunFailure(
                code, f"/compact stopped after {passes} pass(es): {type(exc).__name__}", ErrorFamily.UNKNOWN
            )
            return LoopOutcome(
                OutcomeKind.FAILED,
                failure=failure,
                summary=f"/compact failed after {passes} pass(es); what they spent is counted. No reply was sent.",
                usage=tally.usage,
                cost_micros=tally.cost_micros,
                steps=passes,
            )
        summary = (
            f"/compact: the thread summary was compacted ({passes} pass(es)); no reply was sent."
            if passes
            else "/compact: the thread summary already covers every message; no reply was sent."
        )
        if passes and not within_budgets() and passes < MAX_PASSES:
            summary += " Stopped at the run's budget: send /compact again to go on."
        return LoopOutcome(
            OutcomeKind.FINISHED, summary=summary, usage=tally.usage, cost_micros=tally.cost_micros, steps=passes
        )
