"""Settings of the runner service (env prefix ``RUNNER_``)."""

from __future__ import annotations

import os
import socket

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from switchboard.credentials import ProviderSettings
from switchboard.settings import EgressSettings, ServiceSettings


def _default_runner_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class RunnerSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the runner needs."""

    model_config = SettingsConfigDict(env_prefix="RUNNER_")

    providers: ProviderSettings = Field(default_factory=ProviderSettings)
    # Where a credential's base_url (set by a tenant) may lead; the platform's endpoints are trusted.
    egress: EgressSettings = Field(default_factory=EgressSettings)

    # Identity of this process in run_started / heartbeats (pod name in Kubernetes).
    runner_id: str = Field(default_factory=_default_runner_id)
    group_id: str = "switchboard-runner"
    # Runs held at once; beyond it the consumer pauses its partitions (back-pressure).
    max_in_flight: int = Field(default=200, ge=1, le=10_000)
    # The dispatcher expects a heartbeat per in-flight run at this period (docs/dispatcher.md).
    heartbeat_s: float = Field(default=10.0, gt=0, le=300)
    # SIGTERM: stop taking runs, let in-flight ones finish this long, then hand the rest back (the
    # dispatcher recovers them at once, without counting the attempt). 90 s lets most runs finish —
    # a model call may take up to RUNNER_MODEL_CALL_TIMEOUT_S — so a rolling deploy seldom pays for
    # a run twice; the pod's terminationGracePeriodSeconds is derived from it (make manifests).
    shutdown_grace_s: float = Field(default=90.0, ge=0, le=600)
    # A run whose conversation still has an active run waits this long for it to end.
    claim_wait_s: float = Field(default=60.0, ge=0, le=3600)
    # Another runner's active run counts as dead when its heartbeat is older than this.
    stale_run_after_s: float = Field(default=60.0, gt=0)
    # The sweep of runs whose runner died (services/runner/sweep.py): how often, and how old a
    # heartbeat must be (far beyond a live run's RUNNER_HEARTBEAT_S and the dispatcher's lease).
    stale_sweep_interval_s: float = Field(default=60.0, gt=0)
    stale_sweep_after_s: float = Field(default=600.0, ge=60)

    model_call_timeout_s: float = Field(default=120.0, gt=0, le=900)
    tool_call_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # Silence watchdog [002]: 15 minutes by default, 1 to 240 minutes; a version's
    # ``silence_timeout_minutes`` wins (this is the default for a version without one).
    silence_timeout_s: float = Field(default=900.0, ge=60, le=240 * 60)
    provider_max_attempts: int = Field(default=4, ge=1, le=10)
    provider_backoff_initial_s: float = Field(default=0.5, gt=0)
    provider_backoff_max_s: float = Field(default=8.0, gt=0)
    # Output cap of one model call, lowered further when the budgets cannot pay for it.
    max_output_tokens: int = Field(default=1024, ge=16, le=64_000)
    # A step that could not produce at least this many tokens is not started.
    min_output_tokens: int = Field(default=64, ge=1)
    # Added to the cap of a model the catalog marks `reasoning` (its thinking counts against the
    # cap and is billed as output); at most half a step's cap goes to thinking (docs/runner.md).
    reasoning_allowance_tokens: int = Field(default=2048, ge=0, le=32_000)

    # The internal MCP tool server (services/api/mcp, mounted in the API) and the lifetime of a run's token.
    mcp_url: str = "http://127.0.0.1:8000/internal/mcp"
    mcp_token_ttl_s: int = Field(default=3600, ge=60)

    # Platform keys: step 3 of credential resolution, when neither the version nor the org has one.
    anthropic_api_key: SecretStr | None = None
    openai_api_key: SecretStr | None = None
    google_api_key: SecretStr | None = None

    # How often the usage ledger is folded into the monthly counters (readers add what is not folded).
    usage_fold_s: float = Field(default=1.0, gt=0, le=300)
    # Connections to PostgreSQL; a one-step run uses four short transactions.
    db_pool_size: int = Field(default=20, ge=1)
    event_queue_size: int = Field(default=50_000, ge=100)

    def platform_keys(self) -> dict[str, SecretStr | None]:
        return {"anthropic": self.anthropic_api_key, "openai": self.openai_api_key, "google": self.google_api_key}
