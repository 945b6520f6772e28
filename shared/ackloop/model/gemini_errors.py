"""Map what can go wrong in a Gemini call onto ackloop's retryable / permanent error tree."""

from __future__ import annotations

import email.utils
import re
import time
from typing import Any

import httpx
from google.genai import errors as genai_errors

from ackloop.domain.errors import ModelPermanentError, ModelRetryableError
from ackloop.telemetry.masking import mask_secrets

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_PERMANENT_REASONS = {
    401: "model_unauthenticated",
    403: "model_permission_denied",
    404: "model_not_found",
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
_INPUT_TOO_LONG = re.compile(r"input token count.*exceeds the maximum", re.IGNORECASE)
"""Gemini's 400 for a request longer than the model's input limit ("The input token count
(N) exceeds the maximum number of tokens allowed (M).")."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """httpx and httpx2 (google-genai's default backend) raise unrelated exception classes."""
    found: list[type[BaseException]] = [httpx.TransportError, TimeoutError]
    try:
        import httpx2
    except ImportError:  # httpx2 is optional for google-genai
        pass
    else:
        found.append(httpx2.TransportError)
    return tuple(found)


TRANSPORT_ERRORS = _transport_errors()
"""Timeouts, refused or dropped connections: the call never got an answer, so try again."""


def from_api_error(error: genai_errors.APIError) -> ModelRetryableError | ModelPermanentError:
    """429/408/5xx -> retryable (429 with ``retry_after``); any other status -> permanent."""
    summary = mask_secrets(
        f"Gemini answered {error.code} {error.status or ''}: {error.message or ''}".strip())
    if error.code in RETRYABLE_STATUS:
        return ModelRetryableError(summary, retry_after=retry_after_seconds(error),
                                   status=error.code)
    reason = _PERMANENT_REASONS.get(error.code, "model_invalid_request")
    if error.code == 400 and _INPUT_TOO_LONG.search(error.message or ""):
        # Named apart: the conversation has outgrown the model's context, and asking again
        # cannot help until its history is shorter.
        reason = "model_input_too_long"
    return ModelPermanentError(summary, reason=reason)


def from_transport_error(error: BaseException) -> ModelRetryableError:
    """The request timed out or the connection failed."""
    kind = "timed out" if "timeout" in type(error).__name__.lower() else "failed"
    return ModelRetryableError(
        mask_secrets(f"Gemini request {kind}: {type(error).__name__}: {error}"))


def retry_after_seconds(error: genai_errors.APIError) -> float | None:
    """Seconds the server asked us to wait: ``Retry-After``, else ``RetryInfo.retryDelay``."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is not None:
        header = headers.get("retry-after")
        if header:
            parsed = parse_retry_after_header(str(header))
            if parsed is not None:
                return parsed
    return _retry_delay_from_details(error.details)


def parse_retry_after_header(value: str) -> float | None:
    """``Retry-After`` is either delta-seconds ("12") or an HTTP date."""
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def _retry_delay_from_details(details: Any) -> float | None:
    """Google APIs put ``{"@type": ".../google.rpc.RetryInfo", "retryDelay": "12s"}`` in details."""
    body = details.get("error", details) if isinstance(details, dict) else None
    entries = body.get("details") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and str(entry.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _DURATION.match(str(entry.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
