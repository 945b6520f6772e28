"""``ackloop dev up|down|status``: the local stack on the official emulators."""

from __future__ import annotations

import json
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console

from ackloop.testing.localstack import DEFAULT_DIRECTORY
from ackloop_dev.devstack import catalog_check, emulators, ports
from ackloop_dev.devstack.processes import StartupFailed
from ackloop_dev.devstack.stack import (
    LAYOUTS,
    LocalStack,
    StackOptions,
    project_root,
    status,
    stop_recorded,
)

app = typer.Typer(no_args_is_help=True, help="Run ackloop locally on the emulators.")
console = Console()


class Layout(StrEnum):
    """Which services run the step kinds, as infra/layout.tf's ``service_layout``."""

    steps = "steps"
    per_step = "per_step"


class Push(StrEnum):
    """Who delivers the push subscriptions."""

    twin = "twin"
    emulator = "emulator"


@app.command()
def up(
    directory: Path = typer.Option(DEFAULT_DIRECTORY, help="Where logs and state go."),
    real_apis: bool = typer.Option(False, help="Call the real weather/IP APIs, not the sandbox."),
    fake_gemini: bool = typer.Option(
        False, help="Serve the scripted model over the Gemini REST API and use google-genai."),
    fake_gemini_rpm: int = typer.Option(
        0, help="With --fake-gemini: the requests a minute it allows, refusing more with a 429 "
        "as Gemini does (0: no limit)."),
    fake_gemini_tpm: int = typer.Option(
        0, help="With --fake-gemini: the input tokens a minute it allows (0: no limit)."),
    base_port: int = typer.Option(8090, help="First of the ports the services listen on."),
    pubsub_port: int = typer.Option(8085, help="Pub/Sub emulator port."),
    firestore_port: int = typer.Option(8086, help="Firestore emulator port."),
    storage_port: int = typer.Option(
        0, help="Cloud Storage emulator port, where the bytes of files are kept (0: a free "
        "port; the export line names it)."),
    emulators_only: bool = typer.Option(
        False, help="Start only the two emulators (for test runs that start their own stacks)."),
    push: Push = typer.Option(
        Push.twin, help="twin: the push delivery with production's retry policy, concurrency "
        "and dead-lettering (ackloop_dev.devstack.push_delivery); emulator: the emulator's own "
        "push (serial, redelivers every ~1 s)."),
    path: list[Path] = typer.Option(
        [], "--path", help="Another directory for the functions' PYTHONPATH (repeatable); the "
        "current directory is always on it."),
    agents: str = typer.Option(
        None, envvar="ACKLOOP_AGENTS", help="The agent catalog, 'package.module:attribute' "
        "(default: $ACKLOOP_AGENTS, else the installed entry points, else the built-in agents)."),
    layout: Layout = typer.Option(
        Layout.steps, help="steps: one service serves every step kind, each under /<kind>, as "
        "deployed by default; per_step: a service per step kind (service_layout in "
        "infra/layout.tf, docs/deployment-layouts.md)."),
    reuse_emulators: bool = typer.Option(
        False, "--reuse-emulators", help="Use the emulators that PUBSUB_EMULATOR_HOST and "
        "FIRESTORE_EMULATOR_HOST name (say, started with --emulators-only in another "
        "directory), and the storage emulator STORAGE_EMULATOR_HOST names if set, instead of "
        "starting them: `dev down` then stops every ackloop process and "
        "leaves the emulators and their data, as Google's services keep theirs."),
) -> None:
    """Start the emulators, topics, subscriptions and the services of the layout (the steps
    service and the API unless ``--layout per_step``); wait until healthy.

    Run it from your project's directory: it is put on every function's PYTHONPATH, so
    ``--agents myapp.agents:catalog`` can import your package.
    """
    # Lines are echoed, never wrapped: a path, a URL or an export line must paste whole.
    if any(process.up for process in status(directory)):
        typer.secho(f"a stack is already running from {directory.resolve()}; "
                    "`ackloop dev down` first", fg="yellow", err=True)
        raise typer.Exit(1)
    if reuse_emulators:
        if emulators_only:
            typer.secho("--reuse-emulators starts no emulator: drop --emulators-only",
                        fg="red", err=True)
            raise typer.Exit(2)
        pubsub_port = _emulator_port("PUBSUB_EMULATOR_HOST")
        firestore_port = _emulator_port("FIRESTORE_EMULATOR_HOST")
    options = StackOptions(
        directory=directory, sandbox_apis=not real_apis and not emulators_only,
        start_emulators=not reuse_emulators,
        fake_gemini=fake_gemini and not emulators_only, base_port=base_port,
        fake_gemini_quota=(fake_gemini_rpm or None, fake_gemini_tpm or None),
        pubsub_port=pubsub_port, firestore_port=firestore_port, storage_port=storage_port,
        services=() if emulators_only else LAYOUTS[layout.value],
        create_topology=not emulators_only, push=push.value,
        python_path=tuple(p.resolve() for p in (Path.cwd(), *path)), agents=agents or None,
    )
    stack = LocalStack(options)
    # Before anything starts: a catalog every function would fail to load is one line.
    if options.services and (refused := catalog_check.refusal(stack.catalog_env(),
                                                              project_root())):
        typer.secho(f"cannot start the stack: {refused}", fg="red", err=True)
        raise typer.Exit(1)
    console.print("[bold]Starting the ackloop local stack[/]")
    try:
        state = stack.up(log=typer.echo)
    except emulators.EmulatorsMissing as exc:
        typer.secho(f"cannot start the emulators: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    except StartupFailed as exc:
        for line in exc.lines:
            typer.secho(line, fg="red", err=True)
        typer.secho("nothing is left running", err=True)
        raise typer.Exit(1) from exc
    if not emulators_only:
        typer.echo(f"model: {state.model}")
        typer.secho(f"up. API: {state.api_url}   state: {directory / 'state.json'}",
                    fg="green")
        typer.echo(f"inspector: {state.api_url}/ui")
    else:
        typer.secho(f"emulators up. state: {directory / 'state.json'}", fg="green")
    typer.echo(f"export PUBSUB_EMULATOR_HOST=127.0.0.1:{state.pubsub_port} "
               f"FIRESTORE_EMULATOR_HOST=127.0.0.1:{state.firestore_port}")
    if storage := state.storage_env():
        typer.echo("export " + " ".join(f"{name}={value}" for name, value in storage.items()))


def _emulator_port(variable: str) -> int:
    """The port of the emulator ``variable`` names on this host, or exit saying what to set."""
    import os

    host, _, port = os.environ.get(variable, "").rpartition(":")
    if host not in ("127.0.0.1", "localhost") or not port.isdigit():
        typer.secho(f"--reuse-emulators: set {variable} to 127.0.0.1:PORT of a running "
                    "emulator (`ackloop dev up --emulators-only` prints the line)", fg="red",
                    err=True)
        raise typer.Exit(2)
    if not ports.in_use(int(port)):
        typer.secho(f"--reuse-emulators: nothing listens on {host}:{port} ({variable})",
                    fg="red", err=True)
        raise typer.Exit(2)
    return int(port)


@app.command()
def down(directory: Path = typer.Option(DEFAULT_DIRECTORY)) -> None:
    """Stop every process `dev up` started (by PID)."""
    stopped = stop_recorded(directory)
    console.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@app.command("status")
def show_status(
    directory: Path = typer.Option(DEFAULT_DIRECTORY),
    as_json: bool = typer.Option(False, "--json", help="One JSON document."),
) -> None:
    """Every process of the local stack: up or down, PID, port, URL, log. Exits 1 when one
    is down or no stack is recorded."""
    rows = status(directory)
    if as_json:
        typer.echo(json.dumps({"directory": str(directory.resolve()),
                               "processes": [asdict(row) for row in rows]}, indent=2))
    elif not rows:
        typer.echo(f"no local stack recorded in {directory.resolve()}", err=True)
    for row in () if as_json else rows:
        typer.secho(f"  {row.name:<20} {'up' if row.up else 'DOWN':<5} pid {row.pid:<8} "
                    f"port {row.port or '-':<6} {row.url or '-'}  log: {row.log or '-'}",
                    fg=None if row.up else "red")
    if not rows or not all(row.up for row in rows):
        raise typer.Exit(1)
