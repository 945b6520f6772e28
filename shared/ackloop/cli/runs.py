"""``ackloop runs dead-letters|redrive|sweep``: dead letters, re-driving them, stalled runs.

Both read the deployment's settings from the environment (``ACKLOOP_*``; against the emulators,
``PUBSUB_EMULATOR_HOST`` and ``FIRESTORE_EMULATOR_HOST`` as ``ackloop dev up`` prints them).
"""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console
from rich.table import Table

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.clock import SystemClock
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.redrive import Redriven, pending_dead_letters, redrive
from ackloop.runtime import build_deps
from ackloop.settings import Settings
from ackloop.store import AgentStore, Retention
from ackloop.sweep import Swept, sweep

app = typer.Typer(no_args_is_help=True,
                  help="Runs: dead letters, re-driving them, and resuming stalled runs.")
console = Console()


def _store(settings: Settings) -> AgentStore:
    db = FirestoreDocumentDB.connect(settings.project_id, settings.firestore_database)
    return AgentStore(db, settings.collection_prefix, Retention.from_settings(settings))


@app.command("dead-letters")
def dead_letters(run: str = typer.Option(None, help="Only this run's dead letters.")) -> None:
    """List dead letters not re-driven yet, with their cause."""
    settings = Settings()
    records = asyncio.run(pending_dead_letters(_store(settings), run_id=run))
    table = Table("message", "run", "step", "origin", "cause")
    for r in records:
        table.add_row(str(r["message_id"]), str(r.get("run_id")), str(r.get("step")),
                      str(r.get("origin")), str(r.get("cause"))[:80])
    console.print(table if records else "no dead letters waiting")


@app.command("redrive")
def redrive_command(
    run: str = typer.Option(None, help="Only this run's dead letters."),
    message: list[str] = typer.Option([], help="Only these dead-letter message ids."),
    dry_run: bool = typer.Option(False, help="Show what would be re-driven."),
) -> None:
    """Re-publish dead-lettered messages to their topic once the cause is fixed.

    A run that failed by dead-lettering is reopened first; the step's claim keeps it from
    running twice.
    """
    settings = Settings()
    publisher = PubSubPublisher(settings.project_id)
    try:
        results = asyncio.run(redrive(_store(settings), publisher, settings, SystemClock(),
                                      run_id=run, message_ids=message, dry_run=dry_run))
    finally:
        publisher.close()
    _print(results)
    if any(r.outcome == "conversation_busy" for r in results):
        raise typer.Exit(1)


@app.command("sweep")
def sweep_command(
    stale_seconds: float = typer.Option(
        None, help="Idle time after which a running run is resumed "
        "(default: ACKLOOP_SWEEP_STALE_SECONDS)."),
) -> None:
    """Resume runs that stopped moving, from their ledger; fail those that cannot be resumed.

    Safe at any time: a re-sent step message is absorbed by the step's claim.
    """
    swept = asyncio.run(_sweep(stale_seconds))
    if not swept:
        console.print("no stalled runs")
        return
    table = Table("run", "action", "detail")
    for s in swept:
        table.add_row(s.run_id, s.action, s.detail)
    console.print(table)


async def _sweep(stale_seconds: float | None) -> list[Swept]:
    deps = await build_deps(Settings())
    return await sweep(deps, stale_after=stale_seconds)


def _print(results: list[Redriven]) -> None:
    if not results:
        console.print("nothing to re-drive")
        return
    table = Table("message", "run", "step", "outcome")
    for r in results:
        table.add_row(r.message_id, str(r.run_id), str(r.step), r.outcome)
    console.print(table)
