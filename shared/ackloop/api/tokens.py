"""Google ID tokens of callers (API callers, Pub/Sub push, the scheduled sweeper).

Two ways to trust one:

- :class:`IdTokenVerifier` checks a token that reaches the app intact: Google's signature,
  issuer, audience. Google's public certificates are fetched from ``certs_url`` and kept for
  ``cache_seconds``; the verification itself (google-auth) is blocking, so it runs in a worker
  thread.
- :func:`cloud_run_checked_claims` reads a token that Cloud Run IAM has already verified in front
  of the service. Cloud Run removes the signature of the token it checked before the request
  reaches the container (the signature part becomes ``SIGNATURE_REMOVED_BY_GOOGLE``), so no app
  can verify that signature again; what the app can still check is *who* the token names (its
  email) and what for (its audience, issuer, expiry). Only sound behind Cloud Run IAM: an app
  reachable without it would accept forged claims.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from google.auth import exceptions, transport

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
GOOGLE_ISSUERS = ("accounts.google.com", "https://accounts.google.com")
# The header Cloud Run IAM checks instead of Authorization when a caller sends it; Authorization
# then reaches the app untouched (and unchecked).
SERVERLESS_AUTHORIZATION = "x-serverless-authorization"
# Leeway on a forwarded token's expiry, as for verified tokens.
CLOCK_SKEW_SECONDS = 10


class InvalidToken(Exception):
    """The token is missing, malformed, expired, not Google's, or for someone else."""


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or :class:`InvalidToken`."""
    if not authorization:
        raise InvalidToken("missing Authorization header")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidToken("Authorization header is not 'Bearer <token>'")
    return token.strip()


def cloud_run_checked_token(headers: Mapping[str, str]) -> str:
    """The bearer token Cloud Run IAM checked: ``X-Serverless-Authorization`` when the request has
    one (Cloud Run checks that header first and passes ``Authorization`` through as it came, so
    a forged token there must not count), else ``Authorization``."""
    serverless = headers.get(SERVERLESS_AUTHORIZATION)
    return bearer_token(serverless if serverless is not None else headers.get("authorization"))


def _segment(part: str) -> Any:
    padded = part + "=" * (-len(part) % 4)
    return json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, read without checking its signature (:class:`InvalidToken` if it is
    not a JWT)."""
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken("token is not a JWT (header.claims.signature)")
    try:
        header, claims = _segment(parts[0]), _segment(parts[1])
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise InvalidToken("token is not a JWT: undecodable header or claims") from exc
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise InvalidToken("token is not a JWT: header and claims must be JSON objects")
    return claims


def cloud_run_checked_claims(
    token: str,
    *,
    emails: Collection[str] | None,
    audience: str | None,
    now: float,
    issuers: Sequence[str] = GOOGLE_ISSUERS,
) -> dict[str, Any]:
    """The claims of a token Cloud Run IAM verified (signature already removed), if they name one
    of ``emails`` (verified; None: whoever Cloud Run IAM let in), are for ``audience`` (when
    given), come from Google's issuer and have not expired; else :class:`InvalidToken` saying
    what was wrong. The signature is not checked: see the module docstring for when that is
    sound."""
    claims = unverified_claims(token)
    if claims.get("iss") not in issuers:
        raise InvalidToken(f"token issuer {claims.get('iss')!r} is not Google")
    expires = claims.get("exp")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)):
        raise InvalidToken("token has no expiry")
    if expires + CLOCK_SKEW_SECONDS < now:
        raise InvalidToken("token expired")
    if audience is not None:
        audiences = claims.get("aud")
        if audience != audiences and not (isinstance(audiences, list) and audience in audiences):
            raise InvalidToken(f"token is for {audiences!r}, not {audience!r}")
    if emails is None:
        return claims
    allowed = _normalized(emails)
    email = str(claims.get("email", "")).lower()
    if email not in allowed or claims.get("email_verified") is not True:
        raise InvalidToken(f"token email {email!r} is not allowed")
    return claims


class _CachedResponse:
    def __init__(self, status: int, data: bytes, headers: Mapping[str, str]) -> None:
        self.status, self.data, self.headers = status, data, headers


class CachingRequest(transport.Request):
    """A google-auth transport request that remembers successful GETs for a while."""

    def __init__(self, inner: transport.Request | None = None,
                 cache_seconds: float = 300.0) -> None:
        if inner is None:
            from google.auth.transport.requests import Request

            inner = Request()
        self._inner = inner
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, _CachedResponse]] = {}
        self._lock = threading.Lock()

    def __call__(self, url: str, method: str = "GET", body: bytes | None = None,
                 headers: Mapping[str, str] | None = None, timeout: float | None = None,
                 **kwargs: Any) -> Any:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(url)
        if method == "GET" and hit is not None and now - hit[0] < self._cache_seconds:
            return hit[1]
        response = self._inner(url, method=method, body=body, headers=headers,
                               timeout=timeout, **kwargs)
        if method == "GET" and response.status == 200:
            kept = _CachedResponse(response.status, response.data, dict(response.headers))
            with self._lock:
                self._cache[url] = (now, kept)
        return response


class IdTokenVerifier:
    """Checks a Google-signed ID token; optionally that its ``email`` is one of ``emails``."""

    def __init__(self, *, emails: Sequence[str] = (), certs_url: str = GOOGLE_CERTS_URL,
                 request: transport.Request | None = None,
                 issuers: Sequence[str] = GOOGLE_ISSUERS) -> None:
        self.emails = _normalized(emails)
        self.certs_url = certs_url
        self.issuers = tuple(issuers)
        self._request = CachingRequest(request) if request is not None else None

    def verify(self, token: str, audience: str | list[str],
               emails: Collection[str] | None = None) -> Mapping[str, Any]:
        """The token's claims, or :class:`InvalidToken` saying what was wrong. ``emails``, when
        given, replaces the verifier's own list of allowed emails for this token."""
        # Imported here: it loads the signature algorithms (cryptography), which only an "oidc"
        # check uses; the deployed services check claims Cloud Run already verified.
        from google.oauth2 import id_token

        if self._request is None:
            self._request = CachingRequest()
        try:
            claims = id_token.verify_token(
                token, self._request, audience=audience, certs_url=self.certs_url,
                clock_skew_in_seconds=10,
            )
        except (ValueError, exceptions.GoogleAuthError) as exc:
            raise InvalidToken(f"token rejected: {exc}") from exc
        if claims.get("iss") not in self.issuers:
            raise InvalidToken(f"token issuer {claims.get('iss')!r} is not Google")
        allowed = self.emails if emails is None else _normalized(emails)
        if allowed:
            email = str(claims.get("email", "")).lower()
            if email not in allowed or claims.get("email_verified") is False:
                raise InvalidToken(f"token email {email!r} is not allowed")
        return claims

    async def verify_async(self, token: str, audience: str | list[str],
                           emails: Collection[str] | None = None) -> Mapping[str, Any]:
        return await asyncio.to_thread(self.verify, token, audience, emails)


def _normalized(emails: Collection[str]) -> frozenset[str]:
    return frozenset(e.strip().lower() for e in emails if e.strip())


def split_emails(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]
