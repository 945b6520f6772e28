"""``ackloop chaos``: the fault-injection suite, with Temporal's worker-kill test beside it."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import typer

from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.report import format_report
from ackloop_dev.chaos.runner import run_chaos
from ackloop_dev.chaos.targets import all_met
from ackloop_dev.chaos.timing import DEFAULT_FACTOR, min_factor


def chaos(
    quick: bool = typer.Option(False, help="Small configuration at the smallest time factor, "
                               "for CI (bounded by the dead-letter path: about 8 minutes)."),
    json_path: Path = typer.Option(None, "--json", help="Write every figure to this file."),
    runs: int = typer.Option(None, help="Override the number of runs."),
    concurrency: int = typer.Option(None, help="Override the runs in flight at once."),
    time_scale: float = typer.Option(
        None, help="The one factor every shipped duration is multiplied by (1: production "
        f"time; default 1/3, --quick {DEFAULT_FACTOR:.4g}, the smallest: below it a request "
        "timeout would fall under the engine's 10 s floor)."),
    seed: int = typer.Option(None, help="Seed of every dice."),
    temporal: bool = typer.Option(True, help="Run Temporal's worker-kill test beside ours."),
    directory: Path = typer.Option(None, help="Keep the stack's logs and ledgers here."),
) -> None:
    """Run agent runs through the full local stack while injecting faults; check every run.

    The engine and the delivery run on the shipped numbers (lease, step and delivery attempts,
    the production retry policy through the push delivery); every duration is multiplied by
    one time factor, printed in the report. Exits 1 when a target is not met.
    """
    if time_scale is not None and time_scale < min_factor() - 1e-9:
        raise typer.BadParameter(f"the smallest time factor is {min_factor():.4g}",
                                 param_hint="--time-scale")
    config = ChaosConfig.quick() if quick else ChaosConfig()
    config = replace(
        config,
        temporal=temporal,
        runs=runs if runs is not None else config.runs,
        concurrency=concurrency if concurrency is not None else config.concurrency,
        time_scale=time_scale if time_scale is not None else config.time_scale,
        seed=seed if seed is not None else config.seed,
    )
    where = directory or Path(tempfile.mkdtemp(prefix="ackloop-chaos-"))
    command = "ackloop " + shlex.join(sys.argv[1:])
    figures = asyncio.run(run_chaos(config, where, quick=quick, command=command,
                                    log=lambda m: typer.echo(m, err=True)))
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2, default=str))
    typer.echo(format_report(figures))
    typer.echo(f"(logs and ledgers: {where})", err=True)
    if not all_met(figures["targets"]):
        raise typer.Exit(1)
