"""Settings of the brief service (env prefix ``BRIEF_``)."""

from pydantic_settings import SettingsConfigDict

from switchboard.settings import ServiceSettings


class BriefSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the brief needs."""

    model_config = SettingsConfigDict(env_prefix="BRIEF_")
