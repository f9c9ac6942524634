"""The FastAPI application: probes, metrics, request ids. Domain routers arrive with the API issue."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

REQUEST_ID_HEADER = "X-Request-Id"


def create_app() -> FastAPI:
    """Build the app; every response carries ``X-Request-Id`` (the caller's, or a new one)."""
    app = FastAPI(title="Switchboard API", version="0.1.0", docs_url="/docs", openapi_url="/openapi.json")

    @app.middleware("http")
    async def request_id(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        rid = incoming if 0 < len(incoming) <= 128 else str(uuid.uuid4())
        request.state.request_id = rid
        response = await call_next(request)
        response.headers[REQUEST_ID_HEADER] = rid
        return response

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> dict[str, str]:
        return {"status": "ready"}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(404)
    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            {"error": {"code": "not_found", "message": "No such resource", "request_id": request.state.request_id}},
            status_code=404,
        )

    return app
