"""Settings of the API service (env prefix ``API_``)."""

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from services.api.core.cors import parse_origins
from switchboard.credentials import ProviderSettings
from switchboard.settings import EgressSettings, ServiceSettings


class ApiSettings(ServiceSettings):
    """Shared settings plus the HTTP listener."""

    model_config = SettingsConfigDict(env_prefix="API_")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # Browser origins allowed to call the API (a web UI on another origin), comma-separated
    # (`https://app.example.com,http://localhost:5173`); empty: none (docs/api.md, "Browsers").
    cors_origins: str = ""
    # Proxies whose X-Forwarded-For names the client (comma-separated addresses or CIDRs, `*` for
    # any): the ingress controller's. The default trusts only this host (docs/deploy.md).
    forwarded_allow_ips: str = "127.0.0.1"

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: str) -> str:
        parse_origins(value)  # refuse a typo at startup, not at the first browser call
        return value

    # Seconds uvicorn waits for in-flight requests on SIGTERM.
    graceful_timeout_s: int = Field(default=20, ge=1)
    # Run the transactional outbox relay inside the API process (docs/api.md, "Outbox relay").
    outbox_relay: bool = True
    # Serve the internal MCP tool server at /internal/mcp in this process (docs/runner.md); turn off
    # with API_MCP_ENABLED=false when `switchboard mcp` runs it separately.
    mcp_enabled: bool = True
    # Webhook group commit (services/api/webhooks/group_commit.py): concurrent transactions writing
    # deliveries, and the most deliveries one transaction takes.
    webhook_writers: int = Field(default=2, ge=1, le=64)
    webhook_batch_max: int = Field(default=64, ge=1, le=1000)
    # Fire due scheduled follow-ups as followUp wakes from this process (docs/memory.md); safe on every replica.
    followup_scheduler: bool = True
    # Seconds between two scans for due follow-ups (a follow-up fires at most this late).
    followup_poll_s: float = Field(default=1.0, gt=0, le=60)
    # Run each org's analysis agents once a day from this process (docs/analysis.md); safe on every replica.
    analysis_scheduler: bool = True
    # Local hour (organizations.time_zone) from which an org's daily analysis is due.
    analysis_local_hour: int = Field(default=6, ge=0, le=23)
    # Seconds between two scans for orgs whose analysis is due.
    analysis_poll_s: float = Field(default=60.0, gt=0, le=3600)
    # The sign-in throttle (services/api/identity/throttle.py): failures allowed per email and
    # per client address within the window before logins answer 429 login_rate_limited.
    login_failures_per_email: int = Field(default=10, ge=1, le=10_000)
    login_failures_per_address: int = Field(default=100, ge=1, le=100_000)
    login_failure_window_s: int = Field(default=900, ge=10, le=86_400)
    # Provider endpoints used to validate BYO keys (env prefix ``PROVIDERS_``).
    providers: ProviderSettings = Field(default_factory=ProviderSettings)
    # Where a credential's base_url may lead when its key is validated (env prefix ``SWITCHBOARD_EGRESS_``).
    egress: EgressSettings = Field(default_factory=EgressSettings)
    # Where WAHA reaches this API (e.g. https://switchboard.example.com): the webhook URL that
    # ``:connect`` writes into a WAHA session. Empty: ``:connect`` answers 409 public_url_not_set.
    public_url: str = ""
    # The WAHA server of channel sessions whose base_url is NULL (the notifier's NOTIFIER_WAHA_BASE_URL).
    waha_base_url: str = "http://127.0.0.1:3000"
    # The platform WAHA's API key (the operator's): used by ``:connect`` and ``/qr`` for sessions
    # without a base_url of their own. Unset: the session's own stored key, as the notifier sends.
    waha_api_key: SecretStr | None = None
