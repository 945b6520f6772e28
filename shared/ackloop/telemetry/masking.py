"""Masking of credentials in text that could reach the model, a stored outcome or a log.

Masking is a safety net, not a secret store: it knows the common shapes (key/token/password pairs,
``Authorization`` values, bearer tokens, URL user-info, Google API keys and a few well-known token
prefixes). A secret in any other shape passes unchanged, so tools should still keep secrets out of
what they return.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterable
from typing import Any

MASK = "***"

# Names whose value is a secret. Bare "key" counts only as a whole name ("?key=..."), so that
# ordinary ids such as ``step_key`` or ``idempotency_key`` stay readable in logs.
_SECRET_NAME = (
    r"(?:(?<![\w-])key"
    r"|(?:[A-Za-z0-9]+[_.-])*?(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key"
    r"|(?:access|refresh|id|auth|session|bearer)?[_-]?token|client[_-]?secret|secret"
    r"|password|passwd|pwd|passphrase|credentials?))"
)
_PAIR_RE = re.compile(
    rf"(?i)(?<![\w-])(?P<name>{_SECRET_NAME})(?P<sep>[\"']?\s*[=:]\s*[\"']?)"
    r"(?P<value>(?!\*\*\*)[^\s\"'&,;)}\]]+)"
)
# "Authorization: Bearer abc", "'authorization': 'Basic abc'", "Proxy-Authorization=..."
_AUTH_HEADER_RE = re.compile(
    r"(?i)(?P<head>(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
    r"(?:(?P<scheme>bearer|basic|digest|token|apikey)\s+)?"
    # The value is never the scheme word itself, so "Bearer ***" is left as it is.
    r"(?P<value>(?!\*\*\*)(?!(?:bearer|basic|digest|token|apikey)\s)[^\s\"',;}]+)"
)
# A bare "bearer <value>" outside a header. A lowercase word under 20 letters is prose ("bearer
# needs a token file"), not a token: tokens carry digits, capitals or punctuation, or are long.
_BEARER_RE = re.compile(
    r"(?i)\b(?P<scheme>bearer)\s+(?!\*\*\*)"
    r"(?-i:(?![a-z]{1,19}(?![A-Za-z0-9\-._~+/=])))[A-Za-z0-9\-._~+/]+=*"
)
_URL_USERINFO_RE = re.compile(
    r"(?i)\b(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@"
)
_TOKEN_SHAPES_RE = re.compile(
    r"AIza[0-9A-Za-z_-]{35}"  # Google API key
    r"|ya29\.[0-9A-Za-z_-]+"  # Google OAuth access token
    r"|\bsk-[A-Za-z0-9_-]{20,}"  # common "secret key" prefix
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
)


_REGISTERED: tuple[str, ...] = ()
"""Registered secrets, longest first (a secret containing another is masked whole)."""


def register_secret(value: str | None) -> None:
    """Mask ``value`` everywhere in this process from now on: in :func:`mask_secrets` (and so
    in every stored error and every log line), whatever its shape. For the process's own
    credentials (the Gemini API key, the API's bearer token), registered where they are read."""
    if value and len(value) >= 4:
        global _REGISTERED
        _REGISTERED = tuple(sorted({*_REGISTERED, value}, key=len, reverse=True))


def registered_secrets() -> tuple[str, ...]:
    """The secrets :func:`register_secret` has registered so far (a cache of masked text
    keys on them: a secret registered later changes what masking gives)."""
    return _REGISTERED


def mask_secrets(text: str, known: Iterable[str] = ()) -> str:
    """Return ``text`` with credentials replaced by ``***``.

    ``known`` adds literal secrets to mask wherever they appear, on top of those registered with
    :func:`register_secret`; values shorter than 4 characters are ignored so that masking cannot
    shred ordinary text.
    """
    for secret in (*known, *_REGISTERED):
        if len(secret) >= 4:
            text = text.replace(secret, MASK)
    text = _URL_USERINFO_RE.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _AUTH_HEADER_RE.sub(
        lambda m: f"{m['head']}{m['scheme'] + ' ' if m['scheme'] else ''}{MASK}", text
    )
    text = _BEARER_RE.sub(lambda m: f"{m['scheme']} {MASK}", text)
    text = _PAIR_RE.sub(lambda m: f"{m['name']}{m['sep']}{MASK}", text)
    return _TOKEN_SHAPES_RE.sub(MASK, text)


def is_secret_name(name: str) -> bool:
    """Whether a field or header called ``name`` holds a credential (``Authorization``...)."""
    return bool(re.fullmatch(f"(?i){_SECRET_NAME}", name)) or "authorization" in name.lower()


def mask_json(value: Any, known: Iterable[str] = ()) -> Any:
    """Mask every string inside a JSON-able value; values under secret-looking keys entirely."""
    known = tuple(known)
    if isinstance(value, str):
        return mask_secrets(value, known)
    if isinstance(value, dict):
        return {
            key: MASK
            if isinstance(key, str) and is_secret_name(key) and isinstance(item, str)
            else mask_json(item, known)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_json(item, known) for item in value]
    return value


class SecretMaskingFilter(logging.Filter):
    """A logging filter that masks credentials in the message, its arguments, its traceback and
    its structured ``fields``.

    Attach it to HANDLERS (``handler.addFilter(SecretMaskingFilter())``): a filter on a logger does
    not see records that propagate from its child loggers. The record is rewritten in place, so
    every handler after this one sees the masked text too.
    """

    def __init__(self, known: Iterable[str] = ()) -> None:
        super().__init__()
        self._known = tuple(known)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask_secrets(record.getMessage(), self._known)
        record.args = None
        if record.exc_info and not record.exc_text:
            # Formatters reuse exc_text when it is set, so the traceback is masked once, here.
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = mask_secrets(record.exc_text, self._known)
        if record.stack_info:
            record.stack_info = mask_secrets(record.stack_info, self._known)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):  # a line's structured fields (ackloop.telemetry.logs)
            record.fields = mask_json(fields, self._known)
        return True


def install_secret_masking(
    logger: logging.Logger | None = None, known: Iterable[str] = ()
) -> SecretMaskingFilter:
    """Add one :class:`SecretMaskingFilter` to every handler of ``logger`` (the root by default).

    Call it after logging is configured; handlers added later need their own filter.
    """
    target = logger if logger is not None else logging.getLogger()
    masking = SecretMaskingFilter(known)
    for handler in target.handlers:
        handler.addFilter(masking)
    return masking
