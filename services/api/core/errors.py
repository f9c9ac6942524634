"""One error envelope with stable codes: ``{"error": {"code", "message", "details"}}``.

Domains raise :class:`ApiError` subclasses; one set of handlers renders them,
and also turns FastAPI's validation errors and unknown routes into the same
envelope. Expected business errors are 4xx and are logged at info level, never
as crashes. Messages never contain secrets (they pass through the scrubber).
"""

from __future__ import annotations

from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from switchboard.observability.logging import get_logger
from switchboard.observability.scrubbing import scrub, scrub_text

log = get_logger(__name__)


class ApiError(Exception):
    """Base of every error the API returns on purpose."""

    status_code: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"
    default_message: ClassVar[str] = "The request cannot be processed"

    def __init__(
        self,
        message: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message or self.default_message)
        self.message = message or self.default_message
        self.details = details or {}
        # Response headers the error comes with (``Retry-After`` of a 429).
        self.headers = headers or {}


class Unauthorized(ApiError):
    status_code = 401
    code = "unauthorized"
    default_message = "A valid bearer token is required"


class Forbidden(ApiError):
    status_code = 403
    code = "forbidden"
    default_message = "Your role does not allow this"


class MfaRequired(ApiError):
    status_code = 403
    code = "mfa_required"
    default_message = "This action needs a session proven with a second factor (TOTP)"


class NotFound(ApiError):
    status_code = 404
    code = "not_found"
    default_message = "No such resource"


class Conflict(ApiError):
    status_code = 409
    code = "conflict"
    default_message = "The resource is not in a state that allows this"


class ValidationFailed(ApiError):
    status_code = 422
    code = "validation_error"
    default_message = "The request is invalid"


class RateLimited(ApiError):
    status_code = 429
    code = "rate_limited"
    default_message = "Too many requests"


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = {}


class ErrorEnvelope(BaseModel):
    """The shape of every error response (documented in OpenAPI)."""

    error: ErrorBody


def error_response(
    status_code: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    # Our own messages ("body.api_key: String should have…"): the shapes are masked, not the field names.
    message, details = scrub_text(message, written_out=False), scrub(details or {}, written_out=False)
    body = {"error": {"code": code, "message": message, "details": details}}
    return JSONResponse(body, status_code=status_code, headers=headers)


# For ``responses=`` in route declarations, so OpenAPI lists each endpoint's errors.
def error_responses(*errors: type[ApiError]) -> dict[int | str, dict[str, Any]]:
    responses: dict[int | str, dict[str, Any]] = {}
    for error in errors:
        entry = responses.setdefault(error.status_code, {"model": ErrorEnvelope, "description": ""})
        entry["description"] = ", ".join(filter(None, [entry["description"], f"`{error.code}`"]))
    return responses


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
}


def _log_refusal(request: Request, status: int, code: str) -> None:
    """One line per refused request, with the id its caller was answered with (``X-Request-Id``)."""
    log.info(
        "request refused",
        extra={
            "error_code": code,
            "status": status,
            "path": request.url.path,
            "request_id": getattr(request.state, "request_id", None),
        },
    )


def install_error_handlers(app: FastAPI) -> None:
    """Render every error, ours or the framework's, as the one envelope."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        _log_refusal(request, exc.status_code, exc.code)
        return error_response(exc.status_code, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {
                "loc": [str(part) for part in err.get("loc", ())],
                "msg": str(err.get("msg", "")),
                "type": str(err.get("type", "")),
            }
            for err in exc.errors()
        ]
        _log_refusal(request, 422, "validation_error")
        return error_response(422, "validation_error", "The request is invalid", {"errors": problems})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code
        _log_refusal(request, exc.status_code, code)
        return error_response(exc.status_code, code, message)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = getattr(request.state, "request_id", None)
        log.error("unhandled error", extra={"path": request.url.path, "request_id": request_id}, exc_info=exc)
        return error_response(500, "internal_error", "Something went wrong on our side; the request id identifies it")
