"""The dispatcher's Prometheus metrics and the no-match watch [004 §8.1, §8.2]."""

from __future__ import annotations

import contextlib
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from prometheus_client import Counter, Gauge, Histogram

from switchboard.contracts import DispatchOutcome
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

DECISIONS = Counter(
    "switchboard_dispatch_decisions_total", "Dispatcher decisions, by org and outcome", ["org", "outcome"]
)
NO_MATCH_RATE = Gauge(
    "switchboard_dispatch_no_match_rate",
    "Share of an org's dispatch requests that matched no agent over the watch window",
    ["org"],
)
NO_MATCH_ALERT = Gauge(
    "switchboard_dispatch_no_match_alert", "1 while an org's no-match rate is above the threshold", ["org"]
)
BATCH_EVENTS = Histogram(
    "switchboard_dispatcher_batch_events",
    "Events per processed batch",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000),
)
BATCH_SECONDS = Histogram(
    "switchboard_dispatcher_batch_seconds",
    "Time to process one batch, by phase",
    ["phase"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
EVENT_WAIT = Histogram(
    "switchboard_dispatcher_event_wait_seconds",
    "From a record's timestamp (its producer's clock) to the start of the batch that handles it",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CONVERSATIONS = Gauge("switchboard_dispatcher_conversations", "Conversations held by this worker, by state", ["state"])
PUBLISHED_AGENTS = Gauge("switchboard_dispatcher_published_agents", "Agents in the published index")
BUDGET_VIEW_AGE = Gauge(
    "switchboard_dispatcher_budget_view_age_seconds", "Age of the set of orgs over budget (its staleness)"
)
ADMISSION_FAILURES = Counter(
    "switchboard_dispatcher_admission_failures_total",
    "Rate-limit admissions that failed (database unreachable): dispatches deferred",
)
TICKS_SENT = Counter("switchboard_dispatcher_ticks_sent_total", "Timer ticks sent to conversations")


@dataclass
class NoMatchWatch:
    """Per org, the share of dispatch requests that matched no agent over a sliding window.

    Above ``threshold`` (with at least ``min_dispatches`` in the window) a warning is
    logged once per window and the alert gauge is raised; it drops when the rate recovers.
    """

    window_s: float = 300.0
    threshold: float = 0.30
    min_dispatches: int = 10
    _seen: dict[uuid.UUID, deque[tuple[datetime, bool]]] = field(default_factory=dict)
    _misses: dict[uuid.UUID, int] = field(default_factory=dict)
    _warned_at: dict[uuid.UUID, datetime] = field(default_factory=dict)
    _touched: set[uuid.UUID] = field(default_factory=set)

    def record(self, org_id: uuid.UUID, outcome: DispatchOutcome, now: datetime) -> float:
        window = self._seen.setdefault(org_id, deque())
        miss = outcome is DispatchOutcome.NO_MATCH
        window.append((now, miss))
        misses = self._misses.get(org_id, 0) + miss
        horizon = now - timedelta(seconds=self.window_s)
        while window and window[0][0] < horizon:
            misses -= window.popleft()[1]
        self._misses[org_id] = misses
        self._touched.add(org_id)
        total = len(window)
        rate = misses / total if total else 0.0
        alerting = total >= self.min_dispatches and rate > self.threshold
        if alerting:
            last = self._warned_at.get(org_id)
            if last is None or now - last >= timedelta(seconds=self.window_s):
                self._warned_at[org_id] = now
                log.warning(
                    "no_match rate above threshold",
                    extra={
                        "organization_id": str(org_id),
                        "no_match_rate": round(rate, 3),
                        "threshold": self.threshold,
                        "dispatches_in_window": total,
                        "window_s": self.window_s,
                    },
                )
        return rate

    def rate(self, org_id: uuid.UUID) -> float:
        window = self._seen.get(org_id)
        return self._misses.get(org_id, 0) / len(window) if window else 0.0

    def expire(self, now: datetime) -> None:
        """Let dispatches older than the window leave it for every org, recorded or not (the
        dispatcher's timer, every tick): an org that went quiet must not stay alerting, and an
        org with nothing left in the window is forgotten (its gauges removed)."""
        horizon = now - timedelta(seconds=self.window_s)
        for org_id, window in list(self._seen.items()):
            if not window or window[0][0] >= horizon:
                continue
            misses = self._misses.get(org_id, 0)
            while window and window[0][0] < horizon:
                misses -= window.popleft()[1]
            self._misses[org_id] = misses
            self._touched.add(org_id)
        self.publish()

    def publish(self) -> None:
        """Set the gauges of the orgs recorded since the last call (once per batch, not per event)."""
        for org_id in self._touched:
            label = str(org_id)
            window = self._seen.get(org_id)
            if not window:
                self._seen.pop(org_id, None)
                self._misses.pop(org_id, None)
                self._warned_at.pop(org_id, None)
                for gauge in (NO_MATCH_RATE, NO_MATCH_ALERT):
                    with contextlib.suppress(KeyError):
                        gauge.remove(label)
                continue
            rate = self.rate(org_id)
            NO_MATCH_RATE.labels(label).set(rate)
            alerting = len(window) >= self.min_dispatches and rate > self.threshold
            NO_MATCH_ALERT.labels(label).set(1 if alerting else 0)
        self._touched.clear()
