"""``ackloop dev up|down|status``: the local stack on the official emulators."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console

from ackloop.devstack import emulators
from ackloop.devstack.stack import LocalStack, StackOptions, StackState, status, stop_recorded

app = typer.Typer(no_args_is_help=True, help="Run ackloop locally on the emulators.")
console = Console()
DEFAULT_DIR = Path(".ackloop/dev")


class Push(StrEnum):
    """Who delivers the push subscriptions."""

    twin = "twin"
    emulator = "emulator"


@app.command()
def up(
    directory: Path = typer.Option(DEFAULT_DIR, help="Where logs and state go."),
    real_apis: bool = typer.Option(False, help="Call the real weather/IP APIs, not the sandbox."),
    fake_gemini: bool = typer.Option(
        False, help="Serve the scripted model over the Gemini REST API and use google-genai."),
    base_port: int = typer.Option(8090, help="First of the ports the services listen on."),
    pubsub_port: int = typer.Option(8085, help="Pub/Sub emulator port."),
    firestore_port: int = typer.Option(8086, help="Firestore emulator port."),
    emulators_only: bool = typer.Option(
        False, help="Start only the two emulators (for test runs that start their own stacks)."),
    push: Push = typer.Option(
        Push.twin, help="twin: the push delivery with production's retry policy, concurrency "
        "and dead-lettering (ackloop.devstack.push_delivery); emulator: the emulator's own "
        "push (serial, redelivers every ~1 s)."),
) -> None:
    """Start the emulators, topics, subscriptions and every function; wait until healthy."""
    if StackState.load(directory) and any(status(directory).values()):
        console.print(f"[yellow]a stack is already running from {directory}; "
                      "`ackloop dev down` first[/]")
        raise typer.Exit(1)
    options = StackOptions(
        directory=directory, sandbox_apis=not real_apis and not emulators_only,
        fake_gemini=fake_gemini and not emulators_only, base_port=base_port,
        pubsub_port=pubsub_port, firestore_port=firestore_port,
        services=() if emulators_only else StackOptions.services,
        create_topology=not emulators_only, push=push.value,
    )
    console.print("[bold]Starting the ackloop local stack[/]")
    try:
        state = LocalStack(options).up(log=console.print)
    except emulators.EmulatorsMissing as exc:
        console.print(f"[red]cannot start the emulators:[/] {exc}")
        raise typer.Exit(2) from exc
    if emulators_only:
        console.print(f"[green]emulators up.[/] state: {directory / 'state.json'}")
        typer.echo(f"export PUBSUB_EMULATOR_HOST=127.0.0.1:{state.pubsub_port} "
                   f"FIRESTORE_EMULATOR_HOST=127.0.0.1:{state.firestore_port}")
        return
    provider = state.model_provider
    if provider in ("auto", "scripted") and not state.fake_gemini_url:
        console.print("[yellow]model: scripted offline model (no Gemini credentials "
                      "configured)[/]")
    console.print(f"[green]up.[/] API: {state.api_url}   state: {directory / 'state.json'}")
    console.print(f"export PUBSUB_EMULATOR_HOST=127.0.0.1:{state.pubsub_port} "
                  f"FIRESTORE_EMULATOR_HOST=127.0.0.1:{state.firestore_port}")


@app.command()
def down(directory: Path = typer.Option(DEFAULT_DIR)) -> None:
    """Stop every process `dev up` started (by PID)."""
    stopped = stop_recorded(directory)
    console.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@app.command("status")
def show_status(directory: Path = typer.Option(DEFAULT_DIR)) -> None:
    """Which processes of the local stack are alive."""
    states = status(directory)
    if not states:
        console.print("no local stack recorded")
        raise typer.Exit(1)
    for name, ok in states.items():
        console.print(f"  {name:<20} {'[green]up[/]' if ok else '[red]down[/]'}")
    if not all(states.values()):
        raise typer.Exit(1)
