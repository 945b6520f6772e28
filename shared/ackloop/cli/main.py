"""``ackloop``: run a service, manage the local stack, ask the agent."""

from __future__ import annotations

from pathlib import Path

import typer

from ackloop.cli import errors
from ackloop.cli.lazy import lazy_group
from ackloop.cli.serving import FUNCTION_TARGETS, function_sources, serve_target

# Imported only when invoked or listed by --help, so that `ackloop run` (every cold start)
# serves without them; `dev`, `bench` and `chaos` come from the development tools (ackloop-dev).
COMMANDS = {"runs": "ackloop.cli.runs:app", "ask": "ackloop.cli.ask:ask",
            "metrics": "ackloop.cli.metrics:metrics", "eval": "ackloop.cli.evals:eval_command",
            "chat": "ackloop.cli.chat:chat", "new": "ackloop.cli.new:new",
            "schedules": "ackloop.cli.schedules:app", "limits": "ackloop.cli.limits:app"}

# Known conditions (no stack, no credentials, no such run) end in one line: cli/errors.py.
app = errors.App(cls=lazy_group(COMMANDS), no_args_is_help=True, add_completion=False,
                 help="Durable AI agents on Pub/Sub and Firestore.")


@app.command()
def run(
    target: str = typer.Option(None, envvar="FUNCTION_TARGET",
                               help="ingest, model_step, tool_step, dead_letter, api; or "
                               "steps (every step kind) or all (every step kind and the API)."),
    port: int = typer.Option(8080, envvar="PORT"),
    host: str = typer.Option("0.0.0.0", envvar="ACKLOOP_HOST"),
    functions_dir: Path = typer.Option(Path("functions"), envvar="ACKLOOP_FUNCTIONS_DIR"),
) -> None:
    """Serve a step function, several (steps, all) or the HTTP API: the container's entrypoint."""
    if target not in FUNCTION_TARGETS:
        raise typer.BadParameter(f"FUNCTION_TARGET must be one of {', '.join(FUNCTION_TARGETS)}")
    sources = function_sources(target, functions_dir)
    for source in sources.values():
        if not source.exists():
            raise typer.BadParameter(f"{source} not found (run from the project root or set "
                                     "ACKLOOP_FUNCTIONS_DIR)")
    serve_target(target, sources, host=host, port=port)


@app.command()
def serve(
    port: int = typer.Option(8080, envvar="PORT"),
    host: str = typer.Option("0.0.0.0", envvar="ACKLOOP_HOST"),
) -> None:
    """Serve the HTTP API (runs, Agent Runtime contract)."""
    from ackloop.api import server
    from ackloop.hosting import runtime

    runtime.serve_target("api")
    server.serve(host=host, port=port)


if __name__ == "__main__":
    app()
