"""The baselines of ``make bench-api``: FastAPI with one JSON endpoint, and the same plus one database transaction.

Served by uvicorn exactly as ``python -m services.api`` serves the real API (one
process, same ``uvicorn.Config`` options, same event loop and HTTP parser), so
the ratio measures what ingest costs on top of the framework, not a difference
in server settings. ``POST /bare`` parses the JSON body and answers a small JSON
envelope; ``POST /bare-db`` does the same inside one transaction running
``SELECT 1`` through the API's own database layer (``services.api.core.database``:
same engine options and pool size), the floor any endpoint that touches
PostgreSQL pays. Usage: ``python -m bench.bare_app PORT``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from sqlalchemy import text

from services.api.core.database import Database
from switchboard.settings import DatabaseSettings


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.database = Database.connect(DatabaseSettings())
    try:
        yield
    finally:
        await app.state.database.dispose()


app = FastAPI(title="bare", lifespan=lifespan)


@app.post("/bare")
async def bare(body: dict[str, Any]) -> dict[str, Any]:
    """Parse the same JSON body the webhook gets and answer a small JSON envelope."""
    return {"data": {"ok": True, "fields": len(body)}}


@app.post("/bare-db")
async def bare_db(body: dict[str, Any], request: Request) -> dict[str, Any]:
    """``/bare`` plus one transaction with one statement: the cost of touching the database at all."""
    database: Database = request.app.state.database
    async with database.sessions() as session, session.begin():
        await session.execute(text("SELECT 1"))
    return {"data": {"ok": True, "fields": len(body)}}


def main() -> None:
    port = int(sys.argv[1])
    # Mirrors services/api/__main__.py: host, no log config, no access log, graceful timeout.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, access_log=False, timeout_graceful_shutdown=20
    )
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
