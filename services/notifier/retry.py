"""Send with retries: transient failures back off exponentially with full jitter, up to a cap.

Permanent failures (4xx) return at once: repeating a request the channel refused cannot help.
The whole loop runs *inside* one delivery claim, so retries never turn into a second claim.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.notifier.channels import ChannelError, SendResult
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    # After an ambiguous failure (``ChannelError.ambiguous``) the retry waits at least this long,
    # so the channel's echo of a send that went out after all has arrived before it is repeated.
    echo_wait_s: float = 2.0

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full jitter: uniform in [0, min(cap, initial * 2^(attempt-1))] (attempt is 1-based)."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * (2 ** (attempt - 1)))
        return (rng or random).uniform(0, ceiling)

    def wait_before_retry(self, attempt: int, error: ChannelError) -> float:
        """The backoff, and never less than ``echo_wait_s`` when ``error`` leaves the send in doubt."""
        delay = self.backoff(attempt)
        return max(delay, self.echo_wait_s) if error.ambiguous else delay


@dataclass(frozen=True)
class Outcome:
    """How a send ended: ``result`` on success, else the last ``error``; ``attempts`` made."""

    attempts: int
    result: SendResult | None = None
    error: ChannelError | None = None


async def send_with_retry(
    send: Callable[[], Awaitable[SendResult]],
    policy: RetryPolicy,
    *,
    what: dict[str, str],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Outcome:
    attempt = 0
    while True:
        attempt += 1
        try:
            return Outcome(attempts=attempt, result=await send())
        except ChannelError as exc:
            if not exc.transient or attempt >= policy.max_attempts:
                log.warning(
                    "send failed",
                    extra={**what, "error_code": exc.code, "attempts": attempt, "transient": exc.transient},
                )
                return Outcome(attempts=attempt, error=exc)
            delay = policy.backoff(attempt)
            log.info(
                "send failed, retrying", extra={**what, "error_code": exc.code, "attempt": attempt, "retry_in_s": delay}
            )
            await sleep(delay)
