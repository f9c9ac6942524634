"""Retries off the consume path: a reply whose channel failed for a moment waits in the background,
never in front of the next record (docs/notifier.md "Retries").

The first attempt of a send is made while the record is handled. A transient failure
(timeout, connection error, 5xx, 429) hands the claim to :class:`RetryQueue`: one task per
claim sleeps its backoff and tries again, up to the policy's attempts, then records the
outcome. The record's handling ends at once and its offset is committed, so a channel that
is down for minutes delays only its own messages — before, every later record of the
partition (other orgs' replies among them) waited behind its retries.

What a stop does: a graceful stop lets pending retries run for ``grace_s``, then records
each still waiting as ``unknown`` (an earlier attempt may have reached the channel; it is
never re-sent). A crash leaves them ``sending`` with their offsets committed: no redelivery
will find them, so the notifier's sweep marks a claim still ``sending`` after
``NOTIFIER_STALE_CLAIM_S`` as ``unknown`` (``expire_stale_deliveries``, revision 0020).
At most once per message, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from services.notifier.channels import ChannelError
from services.notifier.retry import Outcome, RetryPolicy
from services.notifier.store import Claimed
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

Send = Callable[[], Awaitable[Outcome]]
Record = Callable[["Retry", Outcome], Awaitable[None]]


@dataclass(frozen=True)
class Retry:
    """A claim whose first attempt failed transiently, and how to try and record it."""

    org_id: uuid.UUID
    run_id: uuid.UUID | None  # None: a person's message (no run)
    claimed: Claimed
    attempts: int  # made so far
    error: ChannelError  # the last one
    send_once: Send  # one attempt (Outcome with attempts=1)
    # The run's messages claimed after this one: they go out after it, in order (a reply never
    # overtakes the message its run queued before it), once its retries ended either way.
    followers: tuple[Claimed, ...] = ()


class RetryQueue:
    """Background retries, one task per claim; ``record`` writes each final outcome."""

    def __init__(
        self, policy: RetryPolicy, record: Record, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ):
        self._policy = policy
        self._record = record
        self._sleep = sleep
        self._tasks: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._waiting: dict[uuid.UUID, Retry] = {}
        self._abandoned = False

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def schedule(self, retry: Retry) -> None:
        """Retry ``retry.claimed`` in the background (a claim already scheduled is left alone)."""
        key = retry.claimed.message_id
        if key in self._tasks or self._abandoned:  # killed: the claim stays ``sending`` for the sweep
            return
        self._waiting[key] = retry
        task = asyncio.create_task(self._run(retry), name=f"notifier-retry-{key}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._forget(key))

    def _forget(self, key: uuid.UUID) -> None:
        self._tasks.pop(key, None)
        self._waiting.pop(key, None)

    async def _run(self, retry: Retry) -> None:
        attempts, error = retry.attempts, retry.error
        while attempts < self._policy.max_attempts:
            await self._sleep(self._policy.wait_before_retry(attempts, error))
            outcome = await retry.send_once()
            attempts += outcome.attempts
            if outcome.error is None or not outcome.error.transient:
                await self._record(retry, Outcome(attempts=attempts, result=outcome.result, error=outcome.error))
                return
            error = outcome.error
            self._waiting[retry.claimed.message_id] = replace(retry, attempts=attempts, error=error)
        log.warning(
            "send failed",
            extra={"run_id": str(retry.run_id), "error_code": error.code, "attempts": attempts, "transient": True},
        )
        await self._record(retry, Outcome(attempts=attempts, error=error))

    async def wait_idle(self) -> None:
        """Tests: until every scheduled retry ended."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def abandon(self) -> None:
        """A kill: every retry stops where it is and its claim stays ``sending`` for the sweep."""
        self._abandoned = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self, grace_s: float, record_interrupted: Record) -> None:
        """Let pending retries finish for ``grace_s``; record the rest through ``record_interrupted``."""
        if not self._tasks:
            return
        _, still = await asyncio.wait(list(self._tasks.values()), timeout=grace_s)
        interrupted = [self._waiting[key] for key, task in list(self._tasks.items()) if task in still]
        for task in still:
            task.cancel()
        await asyncio.gather(*still, return_exceptions=True)
        for retry in interrupted:
            with contextlib.suppress(Exception):  # the sweep covers what cannot be written now
                await record_interrupted(retry, Outcome(attempts=retry.attempts, error=retry.error))
        if interrupted:
            log.warning("retries interrupted by the stop; recorded as unknown", extra={"count": len(interrupted)})
