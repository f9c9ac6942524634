"""Settings of the brief service (env prefix ``BRIEF_``)."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchboard.settings import ServiceSettings


class BriefSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the brief needs."""

    model_config = SettingsConfigDict(env_prefix="BRIEF_")

    # The consumer group of run_completed, handoff_triggered and insights. A new group
    # replays the topics from the start and rebuilds the same digests (docs/brief.md).
    group_id: str = "switchboard-brief"
    # Records handed to one transaction per org at most (one partition batch).
    max_batch: int = Field(default=200, ge=1, le=5_000)
    # How long the broker may hold a fetch to fill it: every batch recomposes its days' digests
    # from all their facts, so under load fewer, larger batches cost far less than one per record;
    # the digest is for a person reading the Home, a fraction of a second later is no loss.
    batch_wait_ms: int = Field(default=500, ge=0, le=5_000)
    db_pool_size: int = Field(default=5, ge=1)
    # How often the brief looks for orgs whose local day began without a digest (docs/brief.md
    # "The morning digest"); 0 turns the pass off (a replica that only consumes).
    morning_interval_s: float = Field(default=300.0, ge=0, le=86_400)
