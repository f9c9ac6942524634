"""Settings of the runner service (env prefix ``RUNNER_``)."""

from pydantic_settings import SettingsConfigDict

from switchboard.settings import ServiceSettings


class RunnerSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the runner needs."""

    model_config = SettingsConfigDict(env_prefix="RUNNER_")
