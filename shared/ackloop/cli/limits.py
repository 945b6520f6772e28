"""``ackloop limits``: the deployment's model quotas, concurrency limits and spend limits as
declared, and what their limiters hold now (against the local stack in ``--directory`` or the
deployment the environment names, as ``ackloop runs`` is)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import typer

from ackloop.cli.target import DIRECTORY, connect


def limits(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    directory: Path = DIRECTORY,
) -> None:
    """The limits every process shares, and where each stands now."""
    from ackloop.engine.limits_view import lines, snapshot

    target = connect(directory)
    view = asyncio.run(snapshot(target.settings, target.store(), time.time()))
    if as_json:
        typer.echo(json.dumps(view, indent=2))
        return
    for line in lines(view):
        typer.echo(line)
