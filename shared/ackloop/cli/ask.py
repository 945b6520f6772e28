"""``ackloop ask``: publish a question, follow the run live, print the answer.

The answer goes to stdout, everything else to stderr, one line each and never wrapped: the run
id can be pasted into ``ackloop runs show``. The text of the answer being written shows on
stderr as the model streams it (a retried attempt's again from the start, after a
``[retrying …]`` line). The exit code is 0 only when the run answered. A run that waits for a
person's approval is reported with the commands that decide it, and ask exits 2 at once: the
run holds no process while it waits (``ackloop runs follow`` goes on).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from ackloop.cli.errors import CliError
from ackloop.cli.follow import (
    Followed,
    LiveText,
    answer_text,
    cost_line,
    follow,
    outcome_line,
    step_line,
    waiting_lines,
)
from ackloop.cli.target import DIRECTORY, Target, connect
from ackloop.domain.keys import is_run_id, run_id_for_request
from ackloop.domain.wire import FilePart, QueryMessage, RunOptions
from ackloop.files import FileLimits, FileRefused, check_query_files
from ackloop.files import local as local_files

WAITING_EXIT = 2
"""ask's exit code when the run waits for a decision."""


def note(line: str) -> None:
    """A line on stderr, whole (no wrapping at the terminal's width)."""
    typer.echo(line, err=True)


def ask(
    question: str = typer.Argument(..., help="What to ask the agent."),
    conversation: str = typer.Option(None, "--conversation", "-c",
                                     help="Continue this conversation."),
    agent: str = typer.Option("default", help="Which agent of the deployment."),
    request_id: str = typer.Option(None, help="Idempotency key (default: a new one)."),
    max_steps: int = typer.Option(None, help="This run's model step budget."),
    max_seconds: float = typer.Option(None, help="This run's wall clock budget."),
    max_tool_calls: int = typer.Option(None, help="This run's tool call budget."),
    max_tokens: int = typer.Option(None, help="This run's token budget."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    timeout: float = typer.Option(120.0, help="Seconds to wait for the run."),
    file: list[str] = typer.Option(
        [], "--file", "-f", help="A file the question is about (repeatable): a local path, "
        "sent inline (its type from its extension: PDF, PNG, JPEG, WebP, GIF, audio), or a "
        "gs:// or https:// URI passed as it is."),
    directory: Path = DIRECTORY,
) -> None:
    """Ask the agent a question through the queries topic and follow the run to its answer."""
    request_id = request_id or f"cli-{uuid.uuid4().hex[:16]}"
    try:
        query = QueryMessage(
            request_id=request_id, text=question, conversation_id=conversation, agent=agent,
            options=RunOptions(max_steps=max_steps, max_seconds=max_seconds,
                               max_tool_calls=max_tool_calls, max_tokens=max_tokens),
            files=[file_part(f) for f in file])
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors())
        raise CliError(f"not a valid question: {problems}") from exc
    target = connect(directory)
    if query.files:
        _check_files(query, target)
    followed = asyncio.run(_ask(target, query, timeout, quiet=as_json))
    if as_json:
        typer.echo(json.dumps(_json(followed, query, timeout), ensure_ascii=False, indent=2))
    elif followed.waiting or (followed.sleeping and followed.settled):
        for line in waiting_lines(followed):
            note(line)
        raise typer.Exit(WAITING_EXIT)
    else:
        if followed.run is not None:  # before the outcome, which stays the last line
            note(f"cost {cost_line(followed.cost())}")
        note(outcome_line(followed, timeout))
        if followed.answered and followed.run is not None:
            typer.echo(answer_text(followed.run))
    if not followed.answered:
        raise typer.Exit(WAITING_EXIT if followed.waiting or followed.sleeping else 1)


PUBSUB_MAX_MESSAGE_BYTES = 10_000_000
"""Pub/Sub's largest message: a query's inline files travel in it, base64."""


def mime_type_of(name: str) -> str:
    """The MIME type of a file named ``name``, from its extension."""
    try:
        return local_files.mime_type_of(name)
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def file_part(spec: str) -> FilePart:
    """``--file``: a gs:// or https:// URI as given, else a local file's bytes inline."""
    try:
        return local_files.file_part(spec)
    except OSError as exc:
        raise CliError(f"--file {spec}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _check_files(query: QueryMessage, target: Target) -> None:
    """Refuse here what ingest would refuse (and what Pub/Sub cannot carry), with the reason."""
    try:
        check_query_files(query.files, FileLimits.from_settings(target.settings))
    except FileRefused as exc:
        raise CliError(f"not sent: {exc}") from exc
    size = len(query.model_dump_json())
    if size > PUBSUB_MAX_MESSAGE_BYTES:
        raise CliError(f"not sent: the question with its files is {size} bytes as a message; "
                       f"Pub/Sub carries at most {PUBSUB_MAX_MESSAGE_BYTES}: send smaller "
                       "files, use the HTTP API (POST /runs), or pass a gs:// URI")


async def _ask(target: Target, query: QueryMessage, timeout: float, quiet: bool) -> Followed:
    store = target.store()
    conversation = query.conversation_id
    if conversation and is_run_id(conversation) and (
            await store.runs.get_conversation(conversation)) is None:
        # Ingest would wait for that run to exist (the query redelivered), and this for it.
        raise CliError(f"no conversation {conversation!r}: no run has that id")
    message_id = await publish_query(target, query)
    run_id = run_id_for_request(query.request_id)
    if quiet:
        return await follow(store, run_id, timeout=timeout, message_id=message_id,
                            until_waiting=True)
    note(f"run {run_id} (request {query.request_id})")
    live = LiveText(lambda text: typer.echo(text, nl=False, err=True))
    followed = await follow(store, run_id, timeout=timeout, message_id=message_id,
                            until_waiting=True, on_step=lambda step: live.line(step_line(step)),
                            on_delta=live.delta, quotas=target.settings, on_quota=live.line)
    live.end_line()
    return followed


async def publish_query(target: Target, query: QueryMessage) -> str:
    """Publish ``query`` to the target's queries topic; its Pub/Sub message id."""
    publisher = target.publisher()
    try:
        return await publisher.publish(target.settings.queries_topic,
                                       query.model_dump_json().encode())
    finally:
        await publisher.aclose()


def _json(followed: Followed, query: QueryMessage, timeout: float) -> dict[str, Any]:
    run = followed.run
    common = {"run_id": followed.run_id, "request_id": query.request_id,
              "elapsed_seconds": round(followed.elapsed, 3)}
    if followed.rejection is not None:
        return common | {"status": "rejected", "reason": followed.rejection.get("reason"),
                         "error": followed.rejection.get("error"), "answer": None}
    if followed.waiting:
        return common | {"status": "waiting", "answer": None, "waiting": [
            {"step": s.key, **s.waiting.model_dump(mode="json")}
            for s in followed.waiting if s.waiting is not None]}
    if run is None or not run.status.terminal:
        return common | {"status": "timeout", "answer": None,
                         "error": outcome_line(followed, timeout)}
    return common | {
        "conversation_id": run.conversation_id,
        "status": run.status.value,
        "stop_reason": run.stop_reason.value if run.stop_reason else None,
        "budget_stop": run.budget_stop,
        "answer": run.answer,
        "output": run.output,
        "error": run.error,
        "answered_by": followed.answered_by(),
        "usage": run.usage.model_dump(),
        "cost": run.cost.model_dump() if run.cost else None,
        "steps": [
            {"key": s.key, "kind": s.kind, "name": s.name, "attempts": s.attempts,
             "call_seconds": s.call_seconds, "result": s.result,
             "cost": s.cost.model_dump() if s.cost else None}
            for s in followed.steps
        ],
    }
