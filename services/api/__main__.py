"""Entry point: ``python -m services.api`` or ``switchboard api``.

uvicorn owns the event loop and SIGTERM handling here: on SIGTERM it stops
accepting connections and lets in-flight requests finish (graceful_timeout_s).
"""

import uvicorn

from switchboard.observability.logging import configure_logging, get_logger

from services.api.app import create_app
from services.api.settings import ApiSettings

log = get_logger(__name__)


def main() -> None:
    settings = ApiSettings()
    configure_logging("api", level=settings.runtime.log_level, json_logs=settings.runtime.log_json)
    log.info("service started", extra={"service_name": "api", "port": settings.port})
    config = uvicorn.Config(
        create_app(),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=settings.graceful_timeout_s,
    )
    uvicorn.Server(config).run()
    log.info("service stopped", extra={"service_name": "api"})


if __name__ == "__main__":
    main()
