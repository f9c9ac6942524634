"""Settings of the API service (env prefix ``API_``)."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchboard.settings import ServiceSettings


class ApiSettings(ServiceSettings):
    """Shared settings plus the HTTP listener."""

    model_config = SettingsConfigDict(env_prefix="API_")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # Seconds uvicorn waits for in-flight requests on SIGTERM.
    graceful_timeout_s: int = Field(default=20, ge=1)
