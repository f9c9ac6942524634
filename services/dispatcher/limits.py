"""Budgets and rate limits as the state machine sees them: pure values, no I/O.

- :class:`BudgetView`: the orgs whose monthly token or cost cap is reached, as last read
  from PostgreSQL (``list_orgs_over_budget``), with the time it was read. Up to
  ``DISPATCHER_BUDGET_REFRESH_S`` stale: it guards against runaway spend, and each run's
  own token and cost budgets bound what a run started in that window can cost.
- :class:`Admission`: how many new runs each org may start in this batch. The per-org
  limit must hold across every worker, so the processor asks PostgreSQL once per org
  per batch (``admit_org_runs``, an atomic fixed-window counter) for as many runs as the
  batch wants; the state machine then takes them in event order. ``Admission.unlimited``
  counts what a batch would take, to know what to ask for.
- :func:`reply_not_before`: one reply per agent and conversation per 5 s [004 D7].

A limited dispatch is never dropped: it waits in the conversation with a not-before time
and a tick retries it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class BudgetView:
    """Orgs over their monthly budget (org id -> which cap: ``tokens`` or ``cost``)."""

    over: Mapping[uuid.UUID, str] = field(default_factory=dict)
    read_at: datetime | None = None

    def exceeded(self, org_id: uuid.UUID) -> str | None:
        return self.over.get(org_id)


@dataclass(frozen=True, slots=True)
class Grant:
    """What the database admitted for one org: a count and when the window ends."""

    admitted: int
    window_ends_at: datetime


class Admission:
    """Run starts each org may take in this batch, consumed in event order.

    ``Admission.unlimited()`` admits everything and records the demand per org;
    ``Admission.granted(grants)`` admits exactly what the database granted.
    """

    def __init__(self, grants: Mapping[uuid.UUID, Grant] | None, *, fallback_retry_at: datetime | None = None) -> None:
        self._limited = grants is not None
        self._left: dict[uuid.UUID, int] = {org: g.admitted for org, g in (grants or {}).items()}
        self._retry_at: dict[uuid.UUID, datetime] = {org: g.window_ends_at for org, g in (grants or {}).items()}
        self._fallback_retry_at = fallback_retry_at
        self.demand: dict[uuid.UUID, int] = {}
        self.taken: dict[uuid.UUID, int] = {}

    @classmethod
    def unlimited(cls) -> Admission:
        return cls(None)

    @classmethod
    def granted(cls, grants: Mapping[uuid.UUID, Grant], *, fallback_retry_at: datetime) -> Admission:
        return cls(grants, fallback_retry_at=fallback_retry_at)

    def try_take(self, org_id: uuid.UUID) -> bool:
        """Take one run start for ``org_id``; False when the org's grant is used up."""
        self.demand[org_id] = self.demand.get(org_id, 0) + 1
        if self._limited:
            left = self._left.get(org_id, 0)
            if left <= 0:
                return False
            self._left[org_id] = left - 1
        self.taken[org_id] = self.taken.get(org_id, 0) + 1
        return True

    def checkpoint(self) -> tuple[dict[uuid.UUID, int], dict[uuid.UUID, int], dict[uuid.UUID, int]]:
        """A copy of the counters, to undo the takes of a computation that is thrown away."""
        return dict(self._left), dict(self.demand), dict(self.taken)

    def rollback(self, checkpoint: tuple[dict[uuid.UUID, int], dict[uuid.UUID, int], dict[uuid.UUID, int]]) -> None:
        self._left, self.demand, self.taken = (dict(c) for c in checkpoint)

    def retry_at(self, org_id: uuid.UUID, now: datetime) -> datetime:
        """When a refused run start may be tried again (the end of the org's window)."""
        at = self._retry_at.get(org_id) or self._fallback_retry_at
        return at if at is not None and at > now else now + timedelta(seconds=1)


def reply_not_before(
    last_run_at: Mapping[str, datetime], agent_id: uuid.UUID, now: datetime, interval_s: float
) -> datetime | None:
    """When the agent may next start a run in this conversation; None when it may now."""
    last = last_run_at.get(str(agent_id))
    if last is None or interval_s <= 0:
        return None
    ready = last + timedelta(seconds=interval_s)
    return ready if ready > now else None


@dataclass
class Reservoir:
    """Run starts one worker already took from an org's window but has not used yet.

    Asking PostgreSQL for exactly each batch's demand costs a round trip per batch. A
    worker instead asks for its demand plus a small prefetch (``prefetch_share`` of the
    org's limit, at most ``prefetch_cap``) and serves the next batches of the same window
    from what is left. Tokens come only from the shared counter, so the sum over all
    workers never exceeds the limit; what a worker still holds when the window ends is
    simply not used (at most the prefetch per worker). Tokens are not used in the last
    ``margin_s`` of a window, so a clock slightly ahead of the database's cannot carry
    them into the next window.
    """

    prefetch_share: float = 0.05
    prefetch_cap: int = 1000
    margin_s: float = 0.25
    left: int = 0
    window_ends_at: datetime | None = None
    limit: int | None = None

    def usable(self, now: datetime) -> int:
        if self.window_ends_at is None or now >= self.window_ends_at - timedelta(seconds=self.margin_s):
            return 0
        return self.left

    def take_local(self, wanted: int, now: datetime) -> int:
        """Serve from what is held; returns how many were served."""
        served = min(wanted, self.usable(now))
        self.left -= served
        return served

    def request_size(self, missing: int) -> int:
        """How many to ask the database for when ``missing`` more are needed now."""
        if self.limit is None:
            return missing
        return missing + min(self.prefetch_cap, int(self.limit * self.prefetch_share))

    def refill(self, admitted: int, window_ends_at: datetime, limit: int, missing: int, now: datetime) -> int:
        """Take in what the database admitted; returns how many of ``missing`` it covers."""
        if self.window_ends_at != window_ends_at or self.usable(now) == 0:
            self.left = 0  # a new window: last window's leftovers are gone
        self.window_ends_at = window_ends_at
        self.limit = limit
        served = min(missing, admitted)
        self.left += admitted - served
        return served
