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
    db_pool_size: int = Field(default=5, ge=1)
