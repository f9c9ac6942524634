"""Settings of the dispatcher service (env prefix ``DISPATCHER_``).

Every knob is documented in README.md (Configuration) and docs/dispatcher.md. Tests
shorten the lease, the windows and the intervals through the same variables.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchboard.settings import ServiceSettings


class DispatcherSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the dispatcher needs."""

    model_config = SettingsConfigDict(env_prefix="DISPATCHER_")

    # A run's lease: extended to now + lease_s by run_started and each heartbeat; when it
    # lapses the run is recovered. Must be several runner heartbeat intervals (10 s).
    lease_s: float = Field(default=30.0, gt=0)
    # The lease of a run no runner has acknowledged yet (no run_started, no heartbeat): it
    # may be queued behind a lagging runner's backlog, where a re-dispatch would only add to
    # it. Used as max(start_lease_s, lease_s); also bounds how long a worker that is catching
    # up with its input after a restart or an outage keeps leases from being judged.
    start_lease_s: float = Field(default=120.0, gt=0)
    # The runners' consumer group (scoped by the topic prefix, as the runner scopes it): a run
    # whose start lease lapsed while its request is still at or past this group's committed
    # offset waits in the runners' input and is not recovered, for at most max_queued_s past
    # its dispatch (docs/dispatcher.md "Heartbeats and recovery"). Empty:
    # no check (the start lease alone decides).
    runner_group: str = "switchboard-runner"
    # How often the runner group's committed offsets are read (an answer older than three of
    # these counts as unknown).
    runner_offsets_refresh_s: float = Field(default=5.0, gt=0)
    max_queued_s: float = Field(default=600.0, ge=0)
    # Attempts of one run before it is closed as failed with error family processLost.
    max_attempts: int = Field(default=3, ge=1, le=20)
    # How often the timer scans the local conversation table for due leases and dispatches.
    tick_interval_s: float = Field(default=1.0, gt=0)
    # How often the set of orgs over their monthly budget is re-read (its staleness bound).
    budget_refresh_s: float = Field(default=5.0, gt=0)
    # Runs per window for an org that has no row in organizations (an org's own
    # rate_limit_runs_per_minute wins), and the window length: 60 s in production, so the
    # column means what it says; tests shorten it.
    default_rate_limit: int = Field(default=60, ge=0)
    rate_window_s: int = Field(default=60, ge=1)
    # One reply per agent and conversation per this many seconds [004 D7].
    reply_interval_s: float = Field(default=5.0, ge=0)
    # Most events per processing batch (batches grow with the load: group commit), and an
    # optional linger to fill one (0: a lone event is processed at once).
    batch_size: int = Field(default=500, ge=1, le=10_000)
    batch_wait_ms: float = Field(default=0.0, ge=0)
    # Offsets of processed events are committed this often (a replay after a crash is
    # at most this much, and idempotent).
    commit_interval_s: float = Field(default=1.0, gt=0)
    # Kafka group session: how long a SIGKILLed worker keeps its partitions before the
    # group gives them to another one.
    session_timeout_s: float = Field(default=10.0, ge=6.0)
    # Idle conversation state (no run, nothing waiting) is dropped after this long.
    state_ttl_s: float = Field(default=24 * 3600.0, gt=0)
    # No-match watch [004 §8.2]: window, threshold and the least dispatches to judge by.
    no_match_window_s: float = Field(default=300.0, gt=0)
    no_match_threshold: float = Field(default=0.30, ge=0, le=1)
    no_match_min_dispatches: int = Field(default=10, ge=1)
    # The decision sink (dispatch_decisions topic -> table) runs in this process unless disabled.
    decision_sink_enabled: bool = True
    # How long the broker may hold the sink's fetch to fill a batch (decisions reach the table this much later).
    sink_batch_wait_ms: int = Field(default=500, ge=0, le=5_000)
    # Name of this worker in logs and ticks; empty: host name and pid.
    worker_id: str = ""
