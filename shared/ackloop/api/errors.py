"""Every failure answers with :class:`~ackloop.api.models.ErrorBody`, never a bare 500.

Client mistakes are 4xx with a stable ``code``; a store or bus that is briefly unavailable is
503 with ``Retry-After``; only a bug is 500 (logged, and its details kept out of the body).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ackloop.api.models import ErrorBody, FieldError
from ackloop.domain.errors import DecisionRefused, RetryableError

log = logging.getLogger(__name__)

_CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 406: "not_acceptable", 408: "request_timeout",
          409: "conflict",
          413: "body_too_large", 415: "unsupported_media_type", 422: "invalid_request"}


REFUSED_STATUS: dict[str, int] = {
    "not_found": 404, "reserved_event": 422, "already_decided": 409, "not_waiting": 409,
    "run_ended": 409, "already_received": 409, "too_many_events": 409, "event_gone": 409,
}
"""The answer to a :class:`~ackloop.domain.errors.DecisionRefused`, by its reason: a run or step
the caller cannot see is not found, a name that is the engine's is invalid, and the rest conflict
with what the run holds already (so does a reason not listed)."""


class ApiError(Exception):
    """Raise from a handler to answer ``status`` with an :class:`ErrorBody`."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers, self.extra = headers, extra


def refused(exc: DecisionRefused) -> ApiError:
    """The API's answer to a decision or an event the run refused: its reason is the code."""
    return ApiError(REFUSED_STATUS.get(exc.reason, 409), exc.reason, str(exc))


def encodable(text: str) -> str:
    """``text`` with any lone surrogate (which JSON can carry and UTF-8 cannot) escaped, so an
    answer that quotes what a client sent can always be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_response(status: int, code: str, message: str, *,
                   headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    body = ErrorBody(error=encodable(message), code=code, **extra)
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=status,
                        headers=headers)


def field_errors(errors: Any) -> list[FieldError]:
    out = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        out.append(FieldError(field=encodable(".".join(loc) or "body"),
                              message=encodable(str(err.get("msg", "")))))
    return out


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into an :class:`ErrorBody`."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, headers=exc.headers, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = field_errors(exc.errors())
        summary = "; ".join(f"{f.field}: {f.message}" for f in fields[:3])
        return error_response(422, "invalid_request", f"invalid request: {summary}",
                              fields=fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODES.get(exc.status_code, "error")
        return error_response(exc.status_code, code, str(exc.detail),
                              headers=dict(exc.headers) if exc.headers else None)

    @app.exception_handler(DecisionRefused)
    async def _refused(request: Request, exc: DecisionRefused) -> JSONResponse:
        answer = refused(exc)
        return error_response(answer.status, answer.code, answer.message)

    @app.exception_handler(RetryableError)
    async def _retryable(request: Request, exc: RetryableError) -> JSONResponse:
        after = str(max(1, round(exc.retry_after or 1)))
        return error_response(503, "unavailable", str(exc), headers={"Retry-After": after})

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(500, "internal", "internal error")
