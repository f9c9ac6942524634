"""Settings of the notifier service (env prefix ``NOTIFIER_``)."""

from pydantic_settings import SettingsConfigDict

from switchboard.settings import ServiceSettings


class NotifierSettings(ServiceSettings):
    """Shared Kafka/database/runtime settings plus what only the notifier needs."""

    model_config = SettingsConfigDict(env_prefix="NOTIFIER_")
