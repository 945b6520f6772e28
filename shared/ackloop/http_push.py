"""The HTTP edge of a step function: decode the push, dispatch, map the outcome to a status."""

from __future__ import annotations

import json
import math
import time

from starlette.requests import Request
from starlette.responses import Response

from ackloop.api.tokens import (
    IdTokenVerifier,
    InvalidToken,
    bearer_token,
    cloud_run_checked_claims,
    cloud_run_checked_token,
)
from ackloop.bus.push import MalformedPush, decode_push
from ackloop.config.settings import Settings
from ackloop.engine.dispatch import Kind, dispatch
from ackloop.hosting.runtime import process_deps
from ackloop.telemetry import metrics

# Pub/Sub push requests are small; anything larger is not one.
MAX_PUSH_BYTES = 12 * 1024 * 1024

_push_verifier: IdTokenVerifier | None = None


def push_verifier() -> IdTokenVerifier:
    """This process's verifier of push tokens (it caches Google's certificates)."""
    global _push_verifier
    if _push_verifier is None:
        _push_verifier = IdTokenVerifier()
    return _push_verifier


async def authenticate_push(settings: Settings, request: Request,
                            verifier: IdTokenVerifier | None = None) -> str | None:
    """Why the push must be refused, or None. Nothing is checked when ``ACKLOOP_PUSH_AUTH=none``.

    The token must be for ``ACKLOOP_PUSH_AUTH_AUDIENCE`` (configured, never taken from the
    request) and name ``ACKLOOP_PUSH_AUTH_EMAIL`` (both required by :class:`Settings`), come from
    Google's issuer and be unexpired. ``oidc`` also verifies Google's signature, which only works
    where nothing strips it; ``cloud_run_iam`` trusts Cloud Run IAM in front to have verified it
    (Cloud Run removes the signature of the token it checked).
    """
    if settings.push_auth == "none":
        return None
    audience, email = settings.push_auth_audience, settings.push_auth_email
    assert audience and email, "Settings requires both when push_auth is not 'none'"
    try:
        if settings.push_auth == "cloud_run_iam":
            cloud_run_checked_claims(cloud_run_checked_token(request.headers), emails=[email],
                                     audience=audience, now=time.time())
            return None
        token = bearer_token(request.headers.get("authorization"))
        claims = await (verifier or push_verifier()).verify_async(token, audience)
        named = str(claims.get("email", "")).lower()
        if named != email.lower() or claims.get("email_verified") is not True:
            raise InvalidToken(f"push token is for {claims.get('email')!r}, not {email!r}")
    except InvalidToken as exc:
        return str(exc)
    return None


class BodyTooLarge(Exception):
    """The request body is longer than the limit (found before reading past it)."""


async def read_bounded_body(request: Request, limit: int) -> bytes:
    """The request body, read as it streams in and abandoned at ``limit`` bytes: a client cannot
    make the process buffer more than that (a declared Content-Length over it is refused before
    reading anything)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _json(status: int, body: object, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


async def handle_push(kind: Kind, request: Request) -> Response:
    """Answer one request to a step function; every answer to a push is counted by status in
    the metrics (``ackloop.hosting.push.answers``, by function and status)."""
    response = await _answer(kind, request)
    if request.method == "POST":
        metrics.push_answered(kind, response.status_code)
    return response


async def _answer(kind: Kind, request: Request) -> Response:
    deps = await process_deps()
    if request.method not in ("GET", "POST"):
        return _json(405, {"error": "POST a Pub/Sub push envelope"})
    # The same check for the counters as for a push: a caller without the push token sees only
    # that the process is up (what a health check needs), nothing it counted.
    if refused := await authenticate_push(deps.settings, request):
        if request.method == "GET":
            return _json(200, {"status": "ok"})
        return _json(401, {"error": f"push not authenticated: {refused}"})
    if request.method == "GET":
        counters = deps.store.counters
        return _json(
            200,
            {
                "status": "ok",
                "function": kind,
                "model": deps.model.provider,
                "firestore": counters.as_dict() if counters else None,
                "published": getattr(deps.publisher, "published", None),
            },
        )
    try:
        body = await read_bounded_body(request, MAX_PUSH_BYTES)
    except BodyTooLarge:
        return _json(413, {"error": f"body larger than {MAX_PUSH_BYTES} bytes"})
    try:
        delivery = decode_push(body, request.headers)
    except MalformedPush as exc:
        return _json(400, {"error": str(exc)})
    outcome = await dispatch(deps, kind, delivery)
    headers = None
    if outcome.retry_after is not None:
        headers = {"Retry-After": str(max(1, math.ceil(outcome.retry_after)))}
    if outcome.status == 204:
        return Response(status_code=204)
    return _json(outcome.status, outcome.body, headers)
