"""Settings of the notifier service (env prefix ``NOTIFIER_``)."""

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from switchboard.settings import EgressSettings, ServiceSettings


class NotifierSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the notifier needs."""

    model_config = SettingsConfigDict(env_prefix="NOTIFIER_")

    group_id: str = "switchboard-notifier"
    # Where tenant-set URLs (a session's WAHA base_url, the org webhook) may lead.
    egress: EgressSettings = Field(default_factory=EgressSettings)
    # The WAHA server of channel sessions whose base_url is NULL (the platform default).
    waha_base_url: str = "http://127.0.0.1:3000"
    # The platform WAHA's API key (the operator's), sent for sessions without a base_url of their
    # own — as API_WAHA_API_KEY for `:connect`; unset: the session's own stored key.
    waha_api_key: SecretStr | None = None
    # One HTTP call to a channel or webhook gives up after this long (then it is retried).
    send_timeout_s: float = Field(default=10.0, gt=0, le=120)
    # Transient failures (timeouts, connection errors, 5xx, 429): attempts per message, backoff with jitter.
    send_max_attempts: int = Field(default=5, ge=1, le=20)
    send_backoff_initial_s: float = Field(default=0.5, gt=0)
    send_backoff_max_s: float = Field(default=30.0, gt=0)
    # After a failure that leaves the send in doubt (a timeout, a dropped exchange, a 500 or 504),
    # the retry waits at least this long and first looks for the channel's echo of the message:
    # found, the message went out and is recorded sent, not sent again (docs/notifier.md "Retries").
    send_echo_wait_s: float = Field(default=2.0, ge=0, le=60)
    db_pool_size: int = Field(default=5, ge=1)
    # A claim still `sending` this long was left by a notifier that stopped mid-retry: `unknown`
    # (well above the longest retry: attempts x (timeout + backoff cap)).
    stale_claim_s: float = Field(default=600.0, gt=0)
    # How often every notifier sweeps stale claims (and once at start).
    sweep_interval_s: float = Field(default=60.0, gt=0)
    # How often every notifier looks for orgs whose morning digest push is due (and once at
    # start); 0 turns the push off in this process (docs/notifier.md "The morning digest push").
    digest_interval_s: float = Field(default=60.0, ge=0)
    # At a stop, how long retries still waiting may go on before they are recorded `unknown`.
    retry_grace_s: float = Field(default=5.0, ge=0)
