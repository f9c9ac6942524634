"""Settings of the dispatcher service (env prefix ``DISPATCHER_``)."""

from pydantic_settings import SettingsConfigDict

from switchboard.settings import ServiceSettings


class DispatcherSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the dispatcher needs."""

    model_config = SettingsConfigDict(env_prefix="DISPATCHER_")
