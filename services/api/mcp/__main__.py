"""Standalone MCP tool server: ``switchboard mcp`` or ``python -m services.api.mcp`` (``MCP_HOST``, ``MCP_PORT``).

The API serves the same tool server at ``/internal/mcp`` unless ``API_MCP_ENABLED=false``;
standalone it answers at the same path, for operators who scale it apart from the API.
"""

from __future__ import annotations

import asyncio

import uvicorn
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.api.mcp.server import McpToolServer
from switchboard.observability.logging import configure_logging
from switchboard.run_tokens import RunTokenSettings
from switchboard.settings import ServiceSettings


class McpSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="MCP_")

    host: str = "127.0.0.1"
    port: int = Field(default=8100, ge=0, le=65535)


async def _serve(settings: McpSettings) -> None:
    server = McpToolServer(database=settings.database, secret=RunTokenSettings().secret(settings.runtime))
    config = uvicorn.Config(
        server.standalone_app(), host=settings.host, port=settings.port, lifespan="on", log_config=None
    )
    await uvicorn.Server(config).serve()


def main() -> None:
    settings = McpSettings()
    configure_logging("mcp", level=settings.runtime.log_level, json_logs=settings.runtime.log_json)
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
