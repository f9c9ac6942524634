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

from services.runner.outcome import LoopOutcome, OutcomeKind
from services.runner.providers.base import ProviderAccess
from services.runner.subject import RunSubject
from services.runner.summary import SpendTally, SummaryJob, ThreadSummarizer

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
        budget = subject.version.cost_budget_micros
        passes = 0
        while passes < MAX_PASSES and tally.cost_micros < budget and await self._summarizer.summarize(job):
            passes += 1
        summary = (
            f"/compact: the thread summary was compacted ({passes} pass(es)); no reply was sent."
            if passes
            else "/compact: the thread summary already covers every message; no reply was sent."
        )
        if passes and tally.cost_micros >= budget:
            summary += " Stopped at the run's cost budget: send /compact again to go on."
        return LoopOutcome(
            OutcomeKind.FINISHED, summary=summary, usage=tally.usage, cost_micros=tally.cost_micros, steps=passes
        )
