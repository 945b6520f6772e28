"""Who may call the HTTP API, per ``ACKLOOP_API_AUTH``.

- ``none``: no check in the app: every caller is ``anonymous``, sees and acts on every run and
  is an operator. For local development; the app warns about it at start-up.
- ``bearer``: ``Authorization: Bearer <token>`` must equal the token in
  ``ACKLOOP_API_BEARER_TOKEN_FILE`` (a Secret Manager secret mounted as a file).
- ``google_id_token``: a Google-signed ID token for ``ACKLOOP_API_ID_TOKEN_AUDIENCE``, from one
  of ``ACKLOOP_API_ID_TOKEN_EMAILS`` when set. Behind Cloud Run IAM, send the IAM token in
  ``X-Serverless-Authorization`` so that ``Authorization`` reaches the app intact (Cloud Run
  strips the signature of a token it has checked itself).
- ``cloud_run_iam`` (the deployment's default): behind Cloud Run IAM, the token Cloud Run
  verified names the caller, each invoker by their own subject, so each sees only their own
  runs; when ``ACKLOOP_API_ID_TOKEN_EMAILS`` is set it must name one of them (and carry
  ``ACKLOOP_API_ID_TOKEN_AUDIENCE`` when set). One token, as ``gcloud auth
  print-identity-token`` gives it; the app reads its claims, since Cloud Run removed its
  signature.

The check names the caller (:func:`caller_of`): ``bearer`` for the holder of the shared token,
``google:<subject>`` for an ID token, ``anonymous`` when the app checks no one. Runs and
conversations belong to the caller who created them (see ``ackloop.api.runs``).

``POST /sweep`` also passes for the scheduled sweeper (``ACKLOOP_API_SWEEPER_EMAIL``), whose
token is checked as the mode checks every other token: under ``cloud_run_iam``, the token Cloud
Run checked (Cloud Scheduler can send nothing else; Cloud Run strips its signature), for
``ACKLOOP_API_ID_TOKEN_AUDIENCE`` when set; under ``bearer`` and ``google_id_token``, a
Google-signed ID token the app verifies itself (signature, issuer, audience
``ACKLOOP_API_ID_TOKEN_AUDIENCE``), since nothing in front of the app need have checked it. An
unsigned token naming the sweeper is therefore refused in those modes (behind Cloud Run IAM the
sweeper's stripped token is too: schedule ``ackloop runs sweep`` instead, or use
``cloud_run_iam``). Under ``none`` every caller is an operator and may sweep anyway.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request

from ackloop.api.errors import ApiError
from ackloop.api.tokens import (
    IdTokenVerifier,
    InvalidToken,
    bearer_token,
    cloud_run_checked_claims,
    cloud_run_checked_token,
    split_emails,
    unverified_claims,
)
from ackloop.config.settings import Settings
from ackloop.domain.records import ANONYMOUS
from ackloop.telemetry.masking import register_secret

log = logging.getLogger(__name__)

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
BEARER_CALLER = "bearer"


def caller_of(request: Request) -> str:
    """Who made ``request``, as :meth:`ApiAuth.check` established it."""
    caller: str = getattr(request.state, "caller", ANONYMOUS)
    return caller


OPERATORS_SETTING = "ACKLOOP_API_OPERATORS"


def is_operator(request: Request) -> bool:
    """Whether the caller may act deployment-wide (dead letters, poison, redrive, sweep): one
    of ``ACKLOOP_API_OPERATORS``, or anyone when the app checks no one (``none``: whoever
    reaches it was let in by that choice)."""
    settings = request.app.state.settings
    return settings.api_auth == "none" or caller_of(request) in split_emails(
        settings.api_operators)


def is_the_sweeper(request: Request) -> bool:
    """Whether ``request`` came from the scheduled sweeper (``ACKLOOP_API_SWEEPER_EMAIL``)."""
    return bool(getattr(request.state, "sweeper", False))


def google_caller(claims: Mapping[str, Any]) -> str:
    """The caller an ID token names: its subject (stable for an account, unlike its email)."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise InvalidToken("token has no subject")
    return f"google:{subject}"
# The route the scheduled sweeper calls (api/runs.py).
SWEEP_PATH = "/sweep"


@dataclass(frozen=True)
class ApiAuth:
    """The configured check; :meth:`check` raises 401 for a caller that fails it."""

    mode: str
    token: str | None = None
    audience: str | None = None
    verifier: IdTokenVerifier | None = None
    emails: tuple[str, ...] = ()
    sweeper: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings, verifier: IdTokenVerifier | None = None) -> ApiAuth:
        """Validated at start-up: a mode without what it needs fails loudly here."""
        sweeper = settings.api_sweeper_email or None
        if sweeper and settings.api_auth in ("bearer", "google_id_token"):
            if not settings.api_id_token_audience:
                raise ValueError(
                    f"ACKLOOP_API_SWEEPER_EMAIL with ACKLOOP_API_AUTH={settings.api_auth} needs "
                    "ACKLOOP_API_ID_TOKEN_AUDIENCE: the sweeper's token is verified (signature, "
                    "issuer, audience) like every other token of this mode")
            verifier = verifier or IdTokenVerifier()
        if settings.api_auth == "cloud_run_iam":
            # Without emails, every invoker Cloud Run IAM lets in is a caller of their own.
            callers = tuple(split_emails(settings.api_id_token_emails))
            return cls("cloud_run_iam", audience=settings.api_id_token_audience, emails=callers,
                       sweeper=sweeper)
        if settings.api_auth == "bearer":
            if not settings.api_bearer_token_file:
                raise ValueError("ACKLOOP_API_AUTH=bearer needs ACKLOOP_API_BEARER_TOKEN_FILE")
            token = Path(settings.api_bearer_token_file).read_text().strip()
            register_secret(token)
            if len(token) < 16:
                raise ValueError("the API bearer token must be at least 16 characters")
            return cls("bearer", token=token, audience=settings.api_id_token_audience,
                       verifier=verifier, sweeper=sweeper)
        if settings.api_auth == "google_id_token":
            if not settings.api_id_token_audience:
                raise ValueError(
                    "ACKLOOP_API_AUTH=google_id_token needs ACKLOOP_API_ID_TOKEN_AUDIENCE")
            emails = split_emails(settings.api_id_token_emails)
            if not emails:
                log.warning("API accepts any Google identity with a token for %s: set "
                            "ACKLOOP_API_ID_TOKEN_EMAILS to restrict it",
                            settings.api_id_token_audience)
            return cls("google_id_token", audience=settings.api_id_token_audience,
                       verifier=verifier or IdTokenVerifier(emails=emails), sweeper=sweeper)
        log.warning("ACKLOOP_API_AUTH=none: the API checks no caller, so every caller is "
                    "'anonymous', sees and acts on every run and is an operator (dead letters, "
                    "poison, redrive, sweep). Use it only locally; deployed, use cloud_run_iam")
        return cls("none")

    async def _is_the_sweeper(self, request: Request) -> bool:
        """Whether ``request`` is the sweeper's ``POST /sweep``, its token checked exactly as
        this mode checks every other token: never its claims alone unless Cloud Run checked it
        (``cloud_run_iam``)."""
        if (not self.sweeper or self.mode == "none" or request.method != "POST"
                or request.url.path != SWEEP_PATH):
            return False
        try:
            if self.mode == "cloud_run_iam":
                cloud_run_checked_claims(cloud_run_checked_token(request.headers),
                                         emails=[self.sweeper], audience=self.audience,
                                         now=time.time())
                return True
            assert self.verifier is not None and self.audience is not None
            token = bearer_token(request.headers.get("authorization"))
            # Only a token that says it is the sweeper's is worth a signature check (the shared
            # bearer token of an operator is not a JWT at all).
            if str(unverified_claims(token).get("email", "")).lower() != self.sweeper.lower():
                return False
            await self.verifier.verify_async(token, self.audience, emails=[self.sweeper])
        except InvalidToken as exc:
            log.info("not the sweeper: %s", exc)
            return False
        return True

    async def check(self, request: Request) -> None:
        if await self._is_the_sweeper(request):
            request.state.sweeper = True
            return
        if self.mode == "none":
            return
        try:
            if self.mode == "cloud_run_iam":
                claims = cloud_run_checked_claims(cloud_run_checked_token(request.headers),
                                                  emails=self.emails or None,
                                                  audience=self.audience, now=time.time())
                request.state.caller = google_caller(claims)
                return
            token = bearer_token(request.headers.get("authorization"))
            if self.mode == "bearer":
                assert self.token is not None
                if not hmac.compare_digest(token.encode(), self.token.encode()):
                    raise InvalidToken("wrong bearer token")
                request.state.caller = BEARER_CALLER
            else:
                assert self.verifier is not None and self.audience is not None
                verified = await self.verifier.verify_async(token, self.audience)
                request.state.caller = google_caller(verified)
        except InvalidToken as exc:
            log.info("API call refused: %s", exc)
            # A wrong shared token gets no detail; a bad ID token says what was wrong with it.
            detail = "" if self.mode == "bearer" else f": {exc}"
            raise ApiError(401, "unauthenticated", f"authentication required{detail}",
                           headers=_CHALLENGE) from exc
