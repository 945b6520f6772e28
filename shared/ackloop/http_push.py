"""The HTTP edge of a step function: decode the push, dispatch, map the outcome to a status."""

from __future__ import annotations

import json
import math

from starlette.requests import Request
from starlette.responses import Response

from ackloop.api.tokens import IdTokenVerifier, InvalidToken, bearer_token
from ackloop.engine.dispatch import Kind, dispatch
from ackloop.push import MalformedPush, decode_push
from ackloop.runtime import process_deps
from ackloop.settings import Settings

# Pub/Sub push requests are small; anything larger is not one.
MAX_PUSH_BYTES = 12 * 1024 * 1024

# Deliveries this process answered, by status: read by tests and benchmarks via GET.
_answered: dict[int, int] = {}
_rejected: dict[str, int] = {}


_push_verifier: IdTokenVerifier | None = None


def push_verifier() -> IdTokenVerifier:
    """This process's verifier of push tokens (it caches Google's certificates)."""
    global _push_verifier
    if _push_verifier is None:
        _push_verifier = IdTokenVerifier()
    return _push_verifier


async def authenticate_push(settings: Settings, request: Request,
                            verifier: IdTokenVerifier | None = None) -> str | None:
    """Why the push must be refused, or None. Checks only when ``ACKLOOP_PUSH_AUTH=oidc``.

    The token must be Google-signed, for ``ACKLOOP_PUSH_AUTH_AUDIENCE`` (default: the URL the
    push was sent to, which is what Pub/Sub uses when a subscription names no audience) and,
    when ``ACKLOOP_PUSH_AUTH_EMAIL`` is set, minted for that service account.
    """
    if settings.push_auth != "oidc":
        return None
    if settings.push_auth_audience:
        audience: str | list[str] = settings.push_auth_audience
    else:
        url = request.url.replace(scheme="https", query="")
        base = str(url).rstrip("/")
        audience = [base, f"{base}/"]
    try:
        token = bearer_token(request.headers.get("authorization"))
        claims = await (verifier or push_verifier()).verify_async(token, audience)
        wanted = settings.push_auth_email
        if wanted and (claims.get("email") != wanted or claims.get("email_verified") is False):
            raise InvalidToken(f"push token is for {claims.get('email')!r}, not {wanted!r}")
    except InvalidToken as exc:
        return str(exc)
    return None


def _json(status: int, body: object, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


async def handle_push(kind: Kind, request: Request) -> Response:
    deps = await process_deps()
    if request.method == "GET":
        counters = getattr(deps.store.db, "counters", None)
        return _json(
            200,
            {
                "status": "ok",
                "function": kind,
                "model": deps.model.provider,
                "firestore": counters.as_dict() if counters else None,
                "published": getattr(deps.publisher, "published", None),
                "deliveries": {str(k): v for k, v in sorted(_answered.items())},
                "rejected": dict(_rejected),
            },
        )
    if request.method != "POST":
        return _json(405, {"error": "POST a Pub/Sub push envelope"})
    if refused := await authenticate_push(deps.settings, request):
        _rejected["unauthenticated"] = _rejected.get("unauthenticated", 0) + 1
        return _json(401, {"error": f"push not authenticated: {refused}"})
    body = await request.body()
    if len(body) > MAX_PUSH_BYTES:
        return _json(413, {"error": f"body larger than {MAX_PUSH_BYTES} bytes"})
    try:
        delivery = decode_push(body, request.headers)
    except MalformedPush as exc:
        return _json(400, {"error": str(exc)})
    outcome = await dispatch(deps, kind, delivery)
    _answered[outcome.status] = _answered.get(outcome.status, 0) + 1
    if reason := outcome.body.get("reason"):
        _rejected[reason] = _rejected.get(reason, 0) + 1
    headers = None
    if outcome.retry_after is not None:
        headers = {"Retry-After": str(max(1, math.ceil(outcome.retry_after)))}
    if outcome.status == 204:
        return Response(status_code=204)
    return _json(outcome.status, outcome.body, headers)
