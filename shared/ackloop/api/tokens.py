"""Verifying Google-signed ID tokens (API callers, Pub/Sub push): signature, issuer, audience.

Google's public certificates are fetched from ``certs_url`` and kept for ``cache_seconds``; the
verification itself (google-auth) is blocking, so it runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from google.auth import exceptions, transport
from google.oauth2 import id_token

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
GOOGLE_ISSUERS = ("accounts.google.com", "https://accounts.google.com")


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
        self.emails = frozenset(e.strip().lower() for e in emails if e.strip())
        self.certs_url = certs_url
        self.issuers = tuple(issuers)
        self._request = CachingRequest(request) if request is not None else None

    def verify(self, token: str, audience: str | list[str]) -> Mapping[str, Any]:
        """The token's claims, or :class:`InvalidToken` saying what was wrong."""
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
        if self.emails:
            email = str(claims.get("email", "")).lower()
            if email not in self.emails or claims.get("email_verified") is False:
                raise InvalidToken(f"token email {email!r} is not allowed")
        return claims

    async def verify_async(self, token: str, audience: str | list[str]) -> Mapping[str, Any]:
        return await asyncio.to_thread(self.verify, token, audience)


def split_emails(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]
