"""``ackloop limits``: the deployment's model quotas, concurrency limits and spend limits in
force, and what their limiters hold now; ``ackloop limits set`` and ``ackloop limits reset``
change them while the deployment runs (:mod:`ackloop.engine.live_limits`). Against the local
stack in ``--directory`` or the deployment the environment names, as ``ackloop runs`` is."""

from __future__ import annotations

import asyncio
import getpass
import json
import sys
import time
from pathlib import Path
from typing import Any

import typer

from ackloop.cli.errors import CliError
from ackloop.cli.target import DIRECTORY, Target, connect

app = typer.Typer(invoke_without_command=True,
                  help="The limits every process shares: show them, set them, reset them.")
JSON_OPTION: bool = typer.Option(False, "--json", help="Print JSON instead of text.")


def _show(target: Target, as_json: bool) -> None:
    from ackloop.engine.limits_view import lines, snapshot

    view = asyncio.run(snapshot(target.settings, target.store(), time.time()))
    if as_json:
        typer.echo(json.dumps(view, indent=2))
        return
    for line in lines(view):
        typer.echo(line)


@app.callback()
def limits(
    context: typer.Context,
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """The limits every process shares, and where each stands now."""
    if context.invoked_subcommand is None:
        _show(connect(directory), as_json)


@app.command("set")
def set_limits(
    body: str = typer.Argument(..., help="The lists to set, as JSON: {\"model_quotas\": [...], "
                               "\"concurrency_limits\": [...], \"spend_limits\": [...]} (each "
                               "as its setting takes it; null: back to the declared list), or "
                               "@FILE, or - for standard input."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Set limits anew while the deployment runs: each list given replaces the one in force
    (every process applies it within limits_refresh_seconds); the others are kept."""
    from pydantic import ValidationError

    from ackloop.engine.live_limits import LimitsChange

    text = _text_of(body)
    try:
        change = LimitsChange.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                             for e in exc.errors())
        raise CliError(f"the limits given are not valid: {problems}") from exc
    if not change.model_fields_set:
        raise CliError("give at least one of model_quotas, concurrency_limits, spend_limits")
    _changed(connect(directory), change, as_json)


@app.command("reset")
def reset_limits(
    kinds: list[str] = typer.Argument(None, help="model_quotas, concurrency_limits, "
                                      "spend_limits (default: all three)."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Go back to the declared limits (of the kinds named, else all)."""
    from ackloop.engine.live_limits import KINDS, LimitsChange

    unknown = [k for k in kinds or [] if k not in KINDS]
    if unknown:
        raise CliError(f"no such limits: {', '.join(unknown)} (known: {', '.join(KINDS)})")
    _changed(connect(directory), LimitsChange.model_validate(
        dict.fromkeys(kinds or KINDS)), as_json)


def _text_of(body: str) -> str:
    if body == "-":
        return sys.stdin.read()
    if body.startswith("@"):
        try:
            return Path(body[1:]).read_text()
        except OSError as exc:
            raise CliError(f"cannot read {body[1:]}: {exc}") from exc
    return body


def _changed(target: Target, change: Any, as_json: bool) -> None:
    from ackloop.engine import live_limits

    if target.settings.limits_refresh_seconds <= 0:
        raise CliError("this deployment reads no limits set while it runs "
                       "(ACKLOOP_LIMITS_REFRESH_SECONDS=0): change the declared limits and "
                       "redeploy")
    asyncio.run(live_limits.change(target.store(), change, f"cli:{getpass.getuser()}",
                                   time.time()))
    if not as_json:
        typer.echo(f"set; every process applies it within "
                   f"{target.settings.limits_refresh_seconds:g} s")
    _show(target, as_json)
