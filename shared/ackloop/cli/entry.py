"""The ``ackloop`` command's entry point.

The container's command, ``ackloop run`` with its options in the environment
(``FUNCTION_TARGET``, ``PORT``, ``ACKLOOP_HOST``, ``ACKLOOP_FUNCTIONS_DIR``), goes straight to
:func:`ackloop.cli.serving.serve_target` without importing typer and click and building the
command line (60 ms of CPU at every cold start). Anything else, and an ``ackloop run`` whose
environment the command line would refuse or read differently, goes to the typer app
(:mod:`ackloop.cli.main`), which says why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ackloop.cli.serving import FUNCTION_TARGETS, function_sources


def container_run(args: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The arguments of :func:`~ackloop.cli.serving.serve_target` for ``args`` (the command
    line after ``ackloop``), or None unless it is a bare ``run`` whose environment is valid
    as the ``run`` command reads it (every variable unset or non-empty; a known target; a
    decimal port; the functions' modules present)."""
    if list(args) != ["run"]:
        return None
    names = ("FUNCTION_TARGET", "PORT", "ACKLOOP_HOST", "ACKLOOP_FUNCTIONS_DIR")
    if any(environ.get(name) == "" for name in names):
        return None  # click reads an empty variable as unset: let it
    target = environ.get("FUNCTION_TARGET")
    port = environ.get("PORT", "8080")
    if target not in FUNCTION_TARGETS or not (port.isascii() and port.isdigit()):
        return None
    sources = function_sources(target, Path(environ.get("ACKLOOP_FUNCTIONS_DIR", "functions")))
    if not all(source.exists() for source in sources.values()):
        return None
    return {"target": target, "sources": sources, "host": environ.get("ACKLOOP_HOST", "0.0.0.0"),
            "port": int(port)}


def main() -> None:
    """``ackloop``: the container's ``ackloop run`` directly, anything else through typer."""
    options = container_run(sys.argv[1:], os.environ)
    if options is None:
        from ackloop.cli.main import app

        app()
        return
    from ackloop.cli.serving import serve_target

    try:
        serve_target(**options)
    except Exception as exc:  # as the typer app reports it (ackloop.cli.errors.App)
        from ackloop.cli import errors

        message = errors.describe(exc)
        if message is None:
            raise
        errors.report(message)
        sys.exit(errors.EXIT_ERROR)


if __name__ == "__main__":
    main()
