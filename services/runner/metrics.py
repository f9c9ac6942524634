"""The runner's Prometheus metrics [004 §8.1] (``switchboard_`` prefix, like the shared ones)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RUNS_TOTAL = Counter("switchboard_runs_total", "Runs finished by this runner, by status", ["status", "provider"])
RUNS_FAILED = Counter("switchboard_runs_failed_total", "Runs that ended failed, by error code", ["error_code"])
RUNS_HANDOFF = Counter("switchboard_runs_handoff_total", "Runs that ended in handoff, by trigger", ["trigger"])
RUN_LATENCY = Histogram(
    "switchboard_run_latency_seconds",
    "Wall time of a run from start to terminal state",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 900),
)
RUN_TOKENS = Counter("switchboard_run_tokens_total", "Tokens used by runs", ["provider", "direction"])
RUN_COST = Counter("switchboard_run_cost_micro_usd_total", "Cost of runs in micro-USD", ["provider"])
TOOL_CALLS = Histogram("switchboard_run_tool_calls", "Tool calls per run", buckets=(0, 1, 2, 3, 5, 8, 13, 21, 34))
RUNS_IN_FLIGHT = Gauge("switchboard_runs_in_flight", "Runs accepted and not finished in this process")
PROVIDER_RETRIES = Counter("switchboard_provider_retries_total", "Retried model calls", ["provider", "kind"])
TOOL_LOOP_SUSPICIOUS = Counter(
    "switchboard_tool_loop_suspicious_total", "Runs stopped for repeating the same tool call [004 §8.2]"
)
