"""Entry point: ``python -m services.api`` or ``switchboard api``.

uvicorn serves the app inside the shared lifecycle: SIGTERM sets the stop
event, the app's ``draining`` event tells long waits (a dry run's answer, live events) to answer
now, uvicorn stops accepting connections and lets in-flight requests finish
(``API_GRACEFUL_TIMEOUT_S``), and the process exits 0.
"""

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from services.api.app import create_app
from services.api.settings import ApiSettings
from switchboard.lifecycle import run_service


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the lifecycle owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def uvicorn_config(settings: ApiSettings, app: FastAPI | None = None) -> uvicorn.Config:
    """uvicorn for this API. Behind a proxy the client address comes from ``X-Forwarded-For``, but
    only from the proxies ``API_FORWARDED_ALLOW_IPS`` trusts: the sign-in throttle counts failures per
    address, and with every request seen from the ingress's address one stranger's failures would
    lock everyone out (docs/deploy.md)."""
    return uvicorn.Config(
        app or create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=settings.graceful_timeout_s,
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
    )


def main() -> None:
    settings = ApiSettings()
    app = create_app(settings)
    server = _Server(uvicorn_config(settings, app))

    async def _main(stop: asyncio.Event) -> None:
        serving = asyncio.create_task(server.serve())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        app.state.draining.set()  # long waits answer now, within the graceful timeout
        server.should_exit = True
        stopping.cancel()
        await serving

    run_service("api", _main, settings, serve_health=False)


if __name__ == "__main__":
    main()
