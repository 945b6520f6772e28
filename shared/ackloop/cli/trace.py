"""``ackloop runs trace RUN``: a run's span tree, from the trace files of the local stack.

The stack's processes write their spans under ``<stack directory>/traces`` (``ACKLOOP_TRACE_DIR``
in the stack's environment); a deployment sends them to Cloud Trace instead, where the run's
trace id (``ackloop runs show --json``: ``trace_id``) finds them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer

from ackloop.cli.errors import CliError
from ackloop.cli.target import DIRECTORY, connect
from ackloop.telemetry import tracing
from ackloop.telemetry.trace_files import of_run, read_trace, render


def trace_command(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id."),
    as_json: bool = typer.Option(False, "--json", help="Print the spans as JSON."),
    directory: Path = DIRECTORY,
) -> None:
    """A run's trace: each span indented under its parent, with its duration and key
    attributes (step, attempt, claim, outcome, tokens) and its events."""
    target = connect(directory)
    run = asyncio.run(target.store().runs.get_run(run_id))
    if run is None:
        raise CliError(f"no run {run_id} in project {target.settings.project_id}")
    trace_id = run.trace_id or tracing.run_trace_id(run_id)
    traces = Path(target.settings.trace_dir) if target.settings.trace_dir else directory / "traces"
    spans = (of_run(read_trace(traces, trace_id), run_id, tracing.run_root_span_id(run_id))
             if traces.is_dir() else [])
    if not spans:
        raise CliError(f"no spans of run {run_id} (trace {trace_id}) in {traces}: traces are "
                       "written by a stack started with this version (`ackloop dev up`); a "
                       "deployment sends them to Cloud Trace")
    if as_json:
        typer.echo(json.dumps({"run_id": run_id, "trace_id": trace_id, "spans": spans},
                              indent=2, default=str))
        return
    typer.echo(f"run {run_id}  trace {trace_id}  {len(spans)} span(s)")
    for line in render(spans):
        typer.echo(line)
