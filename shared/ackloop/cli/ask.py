"""``ackloop ask``: publish a question, follow the run live, print the answer."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.devstack.stack import StackState
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.keys import run_id_for_request
from ackloop.records import RunRecord, StepRecord, StepStatus
from ackloop.settings import Settings
from ackloop.store import AgentStore
from ackloop.wire import QueryMessage

console = Console(stderr=True)


def _describe(step: StepRecord) -> str:
    result = step.result or {}
    if step.kind == "model":
        calls = result.get("calls") or []
        if calls:
            return "model asks for " + ", ".join(
                f"{c['name']}({json.dumps(c.get('args') or {}, ensure_ascii=False)})" for c in calls
            )
        if "text" in result:
            return "model answers"
        return f"model step: {result}"
    response = result.get("response", {})
    text = json.dumps(response, ensure_ascii=False)
    return f"{step.name} -> {text[:160]}{'…' if len(text) > 160 else ''}"


async def follow(
    store: AgentStore, run_id: str, timeout: float, quiet: bool
) -> tuple[RunRecord | None, list[StepRecord]]:
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    run: RunRecord | None = None
    steps: list[StepRecord] = []
    while time.monotonic() < deadline:
        run, steps = await asyncio.gather(store.get_run(run_id), store.list_steps(run_id))
        for step in steps:
            if step.status is StepStatus.COMPLETED and step.key not in seen:
                seen.add(step.key)
                if not quiet:
                    took = f"{step.call_seconds * 1000:.0f} ms" if step.call_seconds else ""
                    console.print(f"  [green]✓[/] {step.key:<14} {_describe(step)} [dim]{took}[/]")
        if run is not None and run.status.terminal:
            return run, steps
        await asyncio.sleep(0.1)
    return run, steps


def ask(
    question: str = typer.Argument(..., help="What to ask the agent."),
    conversation: str = typer.Option(None, "--conversation", "-c",
                                     help="Continue this conversation."),
    agent: str = typer.Option("default", help="Which agent of the deployment."),
    request_id: str = typer.Option(None, help="Idempotency key (default: a new one)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    timeout: float = typer.Option(120.0, help="Seconds to wait for the run."),
    directory: Path = typer.Option(Path(".ackloop/dev"), help="The local stack's directory."),
) -> None:
    """Ask the agent a question through the queries topic and follow the run to its answer."""
    state = StackState.load(directory)
    if state is not None:
        for key, value in state.client_env().items():
            os.environ.setdefault(key, value)
    if "PUBSUB_EMULATOR_HOST" not in os.environ and state is None:
        console.print("[yellow]no local stack found and no PUBSUB_EMULATOR_HOST: publishing to "
                      "Google Cloud with your default credentials[/]")
    settings = Settings()
    request_id = request_id or f"cli-{uuid.uuid4().hex[:16]}"
    query = QueryMessage(request_id=request_id, text=question, conversation_id=conversation,
                         agent=agent)
    run_id = run_id_for_request(request_id)
    result = asyncio.run(_ask(settings, query, run_id, timeout, as_json))
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False, indent=2))
    elif result["status"] == "completed":
        typer.echo(result["answer"] or json.dumps(result.get("output")))
    else:
        console.print(f"[red]run {run_id} {result['status']}[/]: "
                      f"{result.get('error') or result.get('stop_reason')}")
    if result["status"] != "completed":
        raise typer.Exit(1)


async def _ask(settings: Settings, query: QueryMessage, run_id: str, timeout: float,
               quiet: bool) -> dict[str, Any]:
    publisher = PubSubPublisher(settings.project_id)
    store = AgentStore(
        FirestoreDocumentDB.connect(settings.project_id, settings.firestore_database),
        settings.collection_prefix,
    )
    started = time.monotonic()
    await publisher.publish(settings.queries_topic, query.model_dump_json().encode())
    publisher.close()
    if not quiet:
        console.print(f"[bold]run {run_id}[/] [dim](request {query.request_id})[/]")
    run, steps = await follow(store, run_id, timeout, quiet)
    elapsed = time.monotonic() - started
    if run is None or not run.status.terminal:
        return {"run_id": run_id, "request_id": query.request_id, "status": "timeout",
                "answer": None, "steps": [s.key for s in steps], "elapsed_seconds": elapsed,
                "error": f"no result after {timeout:.0f} s"}
    versions = sorted({str((s.result or {}).get("model_version")) for s in steps
                       if s.kind == "model" and (s.result or {}).get("model_version")})
    if not quiet:
        console.print(f"[dim]{run.status.value} ({run.stop_reason}) in {elapsed:.2f} s, "
                      f"{run.usage.model_calls} model call(s), {run.usage.tool_calls} tool "
                      f"call(s); model: {', '.join(versions) or run.model}[/]")
        if any(v.startswith("scripted") for v in versions):
            console.print("[yellow]answered by the scripted offline model (no Gemini "
                          "credentials configured)[/]")
    return {
        "run_id": run.run_id,
        "request_id": run.request_id,
        "conversation_id": run.conversation_id,
        "status": run.status.value,
        "stop_reason": run.stop_reason.value if run.stop_reason else None,
        "answer": run.answer,
        "output": run.output,
        "error": run.error,
        "usage": run.usage.model_dump(),
        "model_versions": versions,
        "elapsed_seconds": round(elapsed, 3),
        "steps": [
            {"key": s.key, "kind": s.kind, "name": s.name, "attempts": s.attempts,
             "call_seconds": s.call_seconds, "result": s.result}
            for s in steps
        ],
    }
