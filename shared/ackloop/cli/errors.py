"""Known conditions as one line on stderr and exit code 1, in every command, never a traceback.

A user who has no stack up, no credentials, a stopped emulator or a mistyped run id needs the
cause and the next step, not ninety lines of google-auth internals. Everything else (a bug) still
shows its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import typer

EXIT_ERROR = 1

NO_CREDENTIALS = (
    "no local stack and no Google Cloud credentials: start one with `ackloop dev up` (or name "
    "its directory with --directory), or run `gcloud auth application-default login` to use a "
    "deployment"
)


class CliError(Exception):
    """A condition the user can fix, said in one line."""


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe(exc: BaseException) -> str | None:
    """The one line for a known condition anywhere in ``exc``'s chain, or None (a bug)."""
    # Imported here: only an error pays for them, not every start of the command.
    from google.api_core import exceptions as gexc
    from google.auth.exceptions import DefaultCredentialsError

    from ackloop.domain.errors import RetryableError

    for cause in _causes(exc):
        if isinstance(cause, CliError):
            return str(cause)
        if isinstance(cause, DefaultCredentialsError):
            return NO_CREDENTIALS
        if isinstance(cause, gexc.NotFound):
            return f"not found: {_first_line(cause)} (is this the right project and stack?)"
        if isinstance(cause, gexc.PermissionDenied | gexc.Unauthenticated):
            return f"permission denied: {_first_line(cause)}"
        if isinstance(cause, gexc.GoogleAPICallError | gexc.RetryError | RetryableError):
            return f"Firestore or Pub/Sub unavailable: {_first_line(cause)}"
    return None


def report(message: str) -> None:
    """Print ``message`` on stderr as one line (a terminal may fold it; a paste gets it whole)."""
    sys.stderr.write(f"error: {message}\n")


class App(typer.Typer):
    """The ``ackloop`` command: a known condition is :func:`report` ed and exits 1."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            message = describe(exc)
            if message is None:
                raise
            report(message)
            sys.exit(EXIT_ERROR)
