"""Who may call the HTTP API, per ``ACKLOOP_API_AUTH``.

- ``none``: no check in the app. Local development, or Cloud Run IAM in front (the deployed
  default: only ``api_invoker_members`` may invoke the service).
- ``bearer``: ``Authorization: Bearer <token>`` must equal the token in
  ``ACKLOOP_API_BEARER_TOKEN_FILE`` (a Secret Manager secret mounted as a file).
- ``google_id_token``: a Google-signed ID token for ``ACKLOOP_API_ID_TOKEN_AUDIENCE``, from one
  of ``ACKLOOP_API_ID_TOKEN_EMAILS`` when set. Behind Cloud Run IAM, send the IAM token in
  ``X-Serverless-Authorization`` so that ``Authorization`` reaches the app intact (Cloud Run
  strips the signature of a token it has checked itself).
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request

from ackloop.api.errors import ApiError
from ackloop.api.tokens import IdTokenVerifier, InvalidToken, bearer_token, split_emails
from ackloop.settings import Settings
from ackloop.tools.masking import register_secret

log = logging.getLogger(__name__)

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class ApiAuth:
    """The configured check; :meth:`check` raises 401 for a caller that fails it."""

    mode: str
    token: str | None = None
    audience: str | None = None
    verifier: IdTokenVerifier | None = None

    @classmethod
    def from_settings(cls, settings: Settings, verifier: IdTokenVerifier | None = None) -> ApiAuth:
        """Validated at start-up: a mode without what it needs fails loudly here."""
        if settings.api_auth == "bearer":
            if not settings.api_bearer_token_file:
                raise ValueError("ACKLOOP_API_AUTH=bearer needs ACKLOOP_API_BEARER_TOKEN_FILE")
            token = Path(settings.api_bearer_token_file).read_text().strip()
            register_secret(token)
            if len(token) < 16:
                raise ValueError("the API bearer token must be at least 16 characters")
            return cls("bearer", token=token)
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
                       verifier=verifier or IdTokenVerifier(emails=emails))
        return cls("none")

    async def check(self, request: Request) -> None:
        if self.mode == "none":
            return
        try:
            token = bearer_token(request.headers.get("authorization"))
            if self.mode == "bearer":
                assert self.token is not None
                if not hmac.compare_digest(token.encode(), self.token.encode()):
                    raise InvalidToken("wrong bearer token")
            else:
                assert self.verifier is not None and self.audience is not None
                await self.verifier.verify_async(token, self.audience)
        except InvalidToken as exc:
            log.info("API call refused: %s", exc)
            # A wrong shared token gets no detail; a bad ID token says what was wrong with it.
            detail = "" if self.mode == "bearer" else f": {exc}"
            raise ApiError(401, "unauthenticated", f"authentication required{detail}",
                           headers=_CHALLENGE) from exc
