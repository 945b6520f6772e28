"""``ackloop bench``: ackloop, Temporal, DBOS and Restate side by side on the reference workload."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path
from types import FrameType

import typer


def bench(
    quick: bool = typer.Option(False, "--quick", help="Small run, under about 3 minutes."),
    json_path: Path = typer.Option(None, "--json", help="Write every figure here (JSON)."),
    chart: Path = typer.Option(Path("bench-results/bench.png"), "--chart",
                               help="Where to draw the chart (PNG)."),
    cost_curve: Path = typer.Option(None, "--cost-curve",
                                    help="Where to draw the monthly cost curve from the run "
                                    "measured (PNG; default: cost_curve.png next to the "
                                    "chart)."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write the tables here."),
    ackloop_side: bool = typer.Option(True, "--ackloop/--no-ackloop",
                                      help="Measure ackloop (emulators + functions)."),
    temporal_side: bool = typer.Option(True, "--temporal/--no-temporal",
                                       help="Measure Temporal (dev server; extra 'bench')."),
    kill: bool = typer.Option(False, "--kill", help="Also time Temporal worker-kill recovery."),
    dbos_side: bool = typer.Option(True, "--dbos/--no-dbos",
                                   help="Measure DBOS Transact on a local PostgreSQL (extra "
                                   "'bench'; skipped, saying so, when not installed)."),
    restate_side: bool = typer.Option(True, "--restate/--no-restate",
                                      help="Measure Restate on a local server (restate-server, "
                                      "restate-sdk, hypercorn; skipped, saying so, when not "
                                      "installed)."),
    workdir: Path = typer.Option(None, help="Keep logs and databases here."),
) -> None:
    """Run the reference workload (model -> tool -> model -> tool -> model, instant model and
    tools) through ackloop on the emulators, the Temporal dev server, DBOS and Restate, print a
    table, write the figures (--json), draw a chart and the monthly cost curve of the run. A
    section that fails is reported (``meta.failed``) and the others still run; the exit code
    is then 1, after everything was written."""
    from ackloop_dev.bench import report
    from ackloop_dev.bench.compare import BenchOptions, run_bench_sync

    signal.signal(signal.SIGTERM, _exit_cleanly)
    command = "ackloop " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    options = BenchOptions(quick=quick, ackloop=ackloop_side, temporal=temporal_side, kill=kill,
                           dbos=dbos_side, restate=restate_side, workdir=workdir, command=command)
    result = run_bench_sync(options, log=lambda m: typer.echo(m, err=True))
    text = report.render(result)
    typer.echo(text)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2))
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(text + "\n")
    from ackloop_dev.bench.chart import draw

    try:
        typer.echo(f"chart: {draw(result, chart)}", err=True)
        if "ackloop" in result:
            from ackloop_dev.bench.cost_curve import from_bench

            out = cost_curve or chart.with_name("cost_curve.png")
            typer.echo("\n".join(from_bench(result, out, out.with_suffix(".json"))), err=True)
    except ImportError:
        typer.echo("no chart: matplotlib is missing (pip install 'ackloop-dev[bench]')", err=True)
    failed = [t["name"] for t in result.get("targets", []) if not t["holds"]]
    if failed:
        typer.echo(f"targets not met: {'; '.join(failed)}", err=True)
    if broken := result["meta"].get("failed"):
        typer.echo("sections that failed (the others ran): "
                   + "; ".join(f"{name}: {why}" for name, why in broken.items()), err=True)
        raise typer.Exit(1)


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: unwind, so the benchmark stops the processes it started (by PID)."""
    raise SystemExit(128 + signum)
