"""``ackloop metrics``: the local stack's metrics, summed over every process that wrote them.

The stack's processes write their points to ``ACKLOOP_METRICS_DIR`` (``ackloop.telemetry``);
this reads that directory, as the stack's ``state.json`` names it, else the environment's,
else ``<directory>/metrics``. A deployment's metrics are in Cloud Monitoring instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from ackloop.cli import table
from ackloop.cli.errors import CliError
from ackloop.cli.target import DIRECTORY
from ackloop.testing.localstack import StackState

METRICS_DIR = "ACKLOOP_METRICS_DIR"


def metrics_directory(directory: Path) -> Path:
    """Where the processes of the stack in ``directory`` write their metrics."""
    try:
        state = StackState.load(directory)
    except (OSError, ValueError, TypeError) as exc:
        raise CliError(f"{directory / 'state.json'} is not a stack's state ({exc})") from exc
    named = (state.env.get(METRICS_DIR) if state else None) or os.environ.get(METRICS_DIR)
    return Path(named) if named else directory / "metrics"


def metrics(
    as_json: bool = typer.Option(False, "--json", help="One JSON object: every series."),
    directory: Path = DIRECTORY,
) -> None:
    """Counters summed, and step latency percentiles, from the local stack's processes."""
    from ackloop.telemetry.metrics_file import read_series

    where = metrics_directory(directory)
    series = read_series(where) if where.is_dir() else []
    if as_json:
        typer.echo(json.dumps({"directory": str(where),
                               "series": [s.as_dict() for s in series]}))
        return
    if not series:
        typer.echo(f"no metrics in {where} (the local stack writes them as it serves)")
        return

    def labels(attributes: dict[str, object]) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(attributes.items())) or "-"

    counters = [s for s in series if not s.is_histogram]
    table.echo(("METRIC", "ATTRIBUTES", "VALUE"), [
        (s.name, labels(s.attributes), f"{s.value:.6g}") for s in counters], "no counters")
    histograms = [s for s in series if s.is_histogram]
    if histograms:
        typer.echo("")
        table.echo(("METRIC", "ATTRIBUTES", "COUNT", "P50", "P90", "P99", "MAX"), [
            (s.name, labels(s.attributes), str(s.count),
             *(f"{s.percentile(q):.3f}" for q in (50, 90, 99)), f"{s.max:.3f}")
            for s in histograms], "")
