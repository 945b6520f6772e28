"""``ackloop schedules``: list, show, create, pause, resume, trigger, backfill, delete.

Against the local stack in ``--directory`` or the deployment the environment names, as
``ackloop runs`` is: the store read and written directly (:mod:`ackloop.engine.schedule_control`),
the ticks published on the queries topic, and wakes armed on the deployment's queue when one
is configured (else its sweeper fires what is due). A schedule created here starts anonymous
runs, as a query published to the topic does.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from ackloop.cli import table
from ackloop.cli.errors import CliError
from ackloop.cli.target import DIRECTORY, Target, connect

T = TypeVar("T")

app = typer.Typer(no_args_is_help=True, help="Schedules: an agent, an input and when.")
JSON_OPTION: bool = typer.Option(False, "--json", help="Print JSON instead of text.")


def _when(value: float | None) -> str:
    if value is None:
        return "-"
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _moment(text: str | None) -> float | None:
    """Unix seconds, or an ISO time with its zone (``2025-01-01T09:00:00+01:00``)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise CliError(f"{text!r}: give the time's zone (e.g. {text}Z) or Unix seconds")
    return moment.timestamp()


def _with_deps(directory: Path, action: Callable[[Any], Awaitable[T]]) -> T:
    from ackloop.engine import schedule_control as ops
    from ackloop.hosting.runtime import build_waker

    target: Target = connect(directory)

    async def go() -> T:
        deps = await target.engine_deps()
        deps.waker = build_waker(target.settings)
        try:
            return await action(deps)
        except (ops.NoSchedule, ops.CatalogSchedule, ops.NothingDue) as exc:
            raise CliError(str(exc)) from exc

    return asyncio.run(go())


def _view(record: Any) -> dict[str, Any]:
    from ackloop.engine.schedule_control import upcoming

    return {"id": record.id, "source": record.source, "paused": record.paused,
            "spec": record.spec.model_dump(mode="json", exclude_none=True),
            "next_firings": upcoming(record), "last_run_id": record.last_run_id,
            "firings": [f.model_dump(mode="json") for f in record.firings]}


def _print(record: Any, as_json: bool) -> None:
    view = _view(record)
    if as_json:
        typer.echo(json.dumps(view, indent=2))
        return
    spec = record.spec
    rule = (f"cron {spec.cron} ({spec.time_zone})" if spec.cron
            else f"every {spec.every_seconds}s")
    typer.echo(f"schedule {record.id} ({record.source}{', paused' if record.paused else ''}): "
               f"agent {spec.agent}, {rule}, overlap {spec.overlap}")
    typer.echo("next: " + (", ".join(_when(t) for t in view["next_firings"]) or "-"))
    for firing in record.firings:
        typer.echo(f"  {_when(firing.at)}  {firing.outcome:<15} {firing.run_id or ''} "
                   f"{firing.detail or ''}".rstrip())


@app.command("list")
def list_schedules(as_json: bool = JSON_OPTION, directory: Path = DIRECTORY) -> None:
    """Every schedule, with its next firing."""
    records = _with_deps(directory, lambda deps: deps.store.schedules.listing())
    if as_json:
        typer.echo(json.dumps({"schedules": [_view(r) for r in records]}, indent=2))
        return
    table.echo(("SCHEDULE", "SOURCE", "AGENT", "NEXT", "LAST RUN"),
               [(r.id, r.source + (" (paused)" if r.paused else ""), r.spec.agent,
                 _when(r.next_fire_at if r.active else None), r.last_run_id or "-")
                for r in records], "no schedules")


@app.command()
def show(schedule_id: str = typer.Argument(..., metavar="SCHEDULE"),
         as_json: bool = JSON_OPTION, directory: Path = DIRECTORY) -> None:
    """A schedule: its spec, its next 5 firings, its recent firings."""
    from ackloop.engine.schedule_control import existing

    stored = _with_deps(directory, lambda deps: existing(deps, schedule_id))
    _print(stored.record, as_json)


@app.command()
def create(
    schedule_id: str = typer.Argument(..., metavar="SCHEDULE", help="The schedule's id."),
    agent: str = typer.Option("default", "--agent"),
    text: str = typer.Option(..., "--text", help="What each run is asked."),
    cron: str | None = typer.Option(None, "--cron", help="Five fields, e.g. '0 9 * * 1-5'."),
    every: int | None = typer.Option(None, "--every", help="Every this many seconds."),
    time_zone: str = typer.Option("UTC", "--time-zone", help="The cron's IANA zone."),
    overlap: str = typer.Option("skip", "--overlap",
                                help="skip, buffer_one, allow_all or cancel_other."),
    jitter: int = typer.Option(0, "--jitter", help="Up to this many seconds late, per firing."),
    start: str | None = typer.Option(None, "--start", help="Unix seconds or an ISO time."),
    end: str | None = typer.Option(None, "--end", help="Unix seconds or an ISO time."),
    catchup: float = typer.Option(3600.0, "--catchup",
                                  help="Seconds late a firing still runs (after an outage)."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Create a schedule (or replace the one of that id created before, not a catalog's)."""
    from pydantic import ValidationError

    from ackloop.domain.schedules import Schedule
    from ackloop.engine.schedule_control import put_schedule

    try:
        spec = Schedule.model_validate({
            "id": schedule_id, "agent": agent, "text": text, "cron": cron,
            "every_seconds": every, "time_zone": time_zone, "overlap": overlap,
            "jitter_seconds": jitter, "start_at": _moment(start), "end_at": _moment(end),
            "catchup_window_seconds": catchup})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'schedule'}: {e['msg']}"
                             for e in exc.errors())
        raise CliError(f"invalid schedule: {problems}") from exc
    record = _with_deps(directory, lambda deps: put_schedule(deps, spec))
    _print(record, as_json)


def _change(name: str, doc: str) -> None:
    def command(schedule_id: str = typer.Argument(..., metavar="SCHEDULE"),
                as_json: bool = JSON_OPTION, directory: Path = DIRECTORY) -> None:
        from ackloop.engine import schedule_control as ops

        change = getattr(ops, name)
        _print(_with_deps(directory, lambda deps: change(deps, schedule_id)), as_json)

    command.__doc__ = doc
    app.command(name)(command)


_change("pause", "Pause: no firing until it is resumed.")
_change("resume", "Resume: it fires next at its first firing after now.")
_change("delete", "Delete: it fires no more.")


@app.command()
def trigger(schedule_id: str = typer.Argument(..., metavar="SCHEDULE"),
            as_json: bool = JSON_OPTION, directory: Path = DIRECTORY) -> None:
    """Fire now (its overlap policy applies; the schedule does not advance): the tick is
    published for the deployment's ingest, which knows the agents."""
    from ackloop.engine.schedule_control import publish_trigger as fire_now

    fired = _with_deps(directory, lambda deps: fire_now(deps, schedule_id))
    typer.echo(json.dumps(fired.body(), indent=2) if as_json else
               f"schedule {schedule_id}: {fired.outcome} {fired.run_id or ''} "
               f"{fired.detail or ''}".rstrip())


@app.command()
def backfill(schedule_id: str = typer.Argument(..., metavar="SCHEDULE"),
             start: str = typer.Option(..., "--start", help="Unix seconds or an ISO time."),
             end: str = typer.Option(..., "--end", help="Unix seconds or an ISO time."),
             as_json: bool = JSON_OPTION, directory: Path = DIRECTORY) -> None:
    """Run each firing time from --start to --end that is due (at most 1000); a time already
    run runs once; the times after now fire at their own time."""
    from ackloop.engine.schedule_control import backfill as run_range

    first, last = _moment(start) or 0.0, _moment(end) or 0.0
    done = _with_deps(directory, lambda deps: run_range(deps, schedule_id, first, last))
    if as_json:
        typer.echo(json.dumps({"runs": [{"at": b.at, "run_id": b.run_id} for b in done]}))
        return
    table.echo(("AT", "RUN"), [(_when(b.at), b.run_id) for b in done], "no firing in range")
