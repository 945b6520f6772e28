"""``ackloop``: run a service, manage the local stack, ask the agent."""

from __future__ import annotations

from pathlib import Path

import typer

from ackloop.cli import errors
from ackloop.cli.lazy import lazy_group

# Imported only when invoked or listed by --help, so that `ackloop run` (every cold start)
# serves without them; `dev`, `bench` and `chaos` come from the development tools (ackloop-dev).
COMMANDS = {"runs": "ackloop.cli.runs:app", "ask": "ackloop.cli.ask:ask",
            "metrics": "ackloop.cli.metrics:metrics"}

# Known conditions (no stack, no credentials, no such run) end in one line: cli/errors.py.
app = errors.App(cls=lazy_group(COMMANDS), no_args_is_help=True, add_completion=False,
                 help="Durable AI agents on Pub/Sub and Firestore.")

FUNCTION_TARGETS = ("ingest", "model_step", "tool_step", "dead_letter", "api")


@app.command()
def run(
    target: str = typer.Option(None, envvar="FUNCTION_TARGET",
                               help="ingest, model_step, tool_step, dead_letter or api."),
    port: int = typer.Option(8080, envvar="PORT"),
    host: str = typer.Option("0.0.0.0", envvar="ACKLOOP_HOST"),
    functions_dir: Path = typer.Option(Path("functions"), envvar="ACKLOOP_FUNCTIONS_DIR"),
) -> None:
    """Serve one function or the HTTP API: the container's entrypoint."""
    if target not in FUNCTION_TARGETS:
        raise typer.BadParameter(f"FUNCTION_TARGET must be one of {', '.join(FUNCTION_TARGETS)}")
    from ackloop import runtime

    runtime.serve_target(target)  # the process builds only what this service uses
    if target == "api":
        serve(port=port, host=host)
        return
    source = functions_dir / target / "main.py"
    if not source.exists():
        raise typer.BadParameter(f"{source} not found (run from the project root or set "
                                 "ACKLOOP_FUNCTIONS_DIR)")
    serve_function(target, source, host=host, port=port)


def serve_function(target: str, source: Path, *, host: str, port: int) -> None:
    """Serve one function in this process: its ASGI app (:mod:`ackloop.function_app`) under
    uvicorn.

    One process per container instead of exec'ing ``functions-framework`` (a second
    interpreter whose gunicorn master forks a worker): about 40% less memory and a faster cold
    start. Cloud Run restarts a container whose process exits, so it needs no supervisor.
    """
    from uvicorn.config import Config

    from ackloop import startup
    from ackloop.api.limits import ReadDeadline
    from ackloop.api.server import uvicorn_config
    from ackloop.function_app import function_app, load_function
    from ackloop.settings import Settings

    def configured(settings: Settings) -> Config:
        asgi = function_app(load_function(target, source))
        # The same bounds as the API's against slow and numerous clients: headers and body
        # each within api_request_read_seconds, at most api_max_connections at once.
        bounded = ReadDeadline(asgi, settings.api_request_read_seconds)
        return uvicorn_config(settings, host=host, port=port, app=bounded, access_log=False)

    # Exits at once, after one log line, if the function cannot start (ackloop.startup).
    startup.serve(configured)


@app.command()
def serve(
    port: int = typer.Option(8080, envvar="PORT"),
    host: str = typer.Option("0.0.0.0", envvar="ACKLOOP_HOST"),
) -> None:
    """Serve the HTTP API (runs, Agent Runtime contract)."""
    from ackloop import runtime
    from ackloop.api import server

    runtime.serve_target("api")
    server.serve(host=host, port=port)


if __name__ == "__main__":
    app()
