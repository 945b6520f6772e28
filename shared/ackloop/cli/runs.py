"""``ackloop runs``: list, show, follow, cancel, approve, reject, send-event; dead letters,
redrive, stalled runs.

Every command talks to the local stack in ``--directory`` (its ``state.json``) or, without one,
to the deployment the environment names (``ACKLOOP_*``, the emulator variables, or Google
Cloud's default credentials). ``--json`` prints one JSON document (``follow``: JSON lines); the
JSON of a run is the HTTP API's (``GET /runs/{id}``; ``show`` adds each child's own children
under it), of a step event and the end its stream's.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from ackloop.cli import table
from ackloop.cli.errors import CliError
from ackloop.cli.follow import (
    Followed,
    LiveText,
    answer_text,
    cache_share,
    cost_line,
    follow,
    outcome_line,
    step_line,
)
from ackloop.cli.target import DIRECTORY, Target, connect
from ackloop.cli.trace import trace_command
from ackloop.domain.records import RunRecord, RunStatus, StepRecord, StepStatus

if TYPE_CHECKING:
    from ackloop.api.tree import Node
    from ackloop.domain.wire import Usage
    from ackloop.engine.deps import Deps
    from ackloop.engine.redrive import Redriven

app = typer.Typer(no_args_is_help=True,
                  help="Runs: list, show, follow, cancel, approve, reject, send-event, trace; "
                  "dead letters, redrive, sweep.")
app.command("trace")(trace_command)

JSON_OPTION: bool = typer.Option(False, "--json", help="Print JSON instead of text.")
ERROR_CHARS = 100
"""A step's error in the text table (``--json`` has all of it)."""


def _emit(document: Any) -> None:
    # default=str: a stored record's timestamps (expire_at) as text.
    typer.echo(json.dumps(document, ensure_ascii=False, indent=2, default=str))


def _age(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _status(run: RunRecord) -> str:
    if run.budget_stop:
        return f"{run.status.value} (stopped by its {run.budget_stop} budget: no answer)"
    if run.stop_reason:
        return f"{run.status.value} ({run.stop_reason.value})"
    return run.status.value + (" (cancel requested)" if run.cancel_requested else "")


async def _places(target: Target, run: RunRecord) -> list[Any]:
    """The run's model steps waiting for their places under the quotas in force."""
    from ackloop.engine.live_limits import in_force
    from ackloop.engine.quota import waiting_of

    store = target.store()
    quotas = in_force(target.settings, await store.quotas.read_set()
                      if target.settings.limits_refresh_seconds > 0 else None).model_quotas
    if not quotas:
        return []
    return await waiting_of(quotas, store, run.run_id, time.time())


async def _existing(target: Target, run_id: str) -> tuple[RunRecord, list[StepRecord]]:
    store = target.store()
    run, steps = await asyncio.gather(store.runs.get_run(run_id), store.steps.list_steps(run_id))
    if run is None:
        raise CliError(f"no run {run_id} in project {target.settings.project_id}"
                       + (f" (collection prefix {target.settings.collection_prefix!r})"
                          if target.settings.collection_prefix else ""))
    return run, steps


@app.command("list")
def list_runs(
    limit: int = typer.Option(20, min=1, max=1000, help="At most this many runs."),
    status: RunStatus = typer.Option(None, help="Only runs in this status."),
    agent: str = typer.Option(None, help="Only this agent's runs."),
    conversation: str = typer.Option(None, help="Only this conversation's runs."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """The newest runs first: run, agent, status, stop reason, steps, age."""
    target = connect(directory)
    runs = asyncio.run(target.store().runs.recent_runs(
        limit, status=status, agent=agent, conversation_id=conversation))
    if as_json:
        from ackloop.api.models import RunSummary

        _emit({"runs": [RunSummary.of(r).model_dump(mode="json") for r in runs]})
        return
    now = time.time()
    table.echo(("RUN", "AGENT", "STATUS", "STOP REASON", "STEPS", "AGE"), [
        (r.run_id, r.agent, r.status.value, r.stop_reason.value if r.stop_reason else "-",
         str(r.steps_total or r.usage.model_calls + r.usage.tool_calls),
         _age(now - r.created_at)) for r in runs], "no runs")


@app.command("show")
def show(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """A run (status, stop reason, answer or error, usage, timings), each of its steps, and
    the tree of its child runs (its sub-agents' calls, theirs, and so on)."""
    from ackloop.api.tree import tree

    target = connect(directory)

    async def read() -> tuple[RunRecord, list[StepRecord], list[Node]]:
        run, steps = await _existing(target, run_id)
        return run, steps, await tree(target.store(), run, steps)

    run, steps, children = asyncio.run(read())
    places = asyncio.run(_places(target, run)) if not run.status.terminal else []
    now = time.time()
    if as_json:
        from ackloop.api.models import QuotaWaitView, RunView

        view = RunView.of_run(run, steps, [(n.step, n.run) for n in children],
                              [QuotaWaitView.of(p, now) for p in places])
        _emit(view.model_dump(mode="json") | {"children": _children_json(children)})
        return
    followed = Followed(run.run_id, run, steps)
    took = f"{run.seconds(time.time()):.2f} s" if run.finished_at is not None else "-"
    fields = [
        ("run", run.run_id), ("request", run.request_id), ("conversation", run.conversation_id),
        ("agent", run.agent + (f" (handed to {run.handed_to})" if run.handed_to else "")),
        ("status", _status(run)),
        ("model", run.model + (f"; answered by {by}" if (by := followed.answered_by()) else "")),
        ("question", run.text.replace("\n", " ")),
        ("answer", answer_text(run) if followed.answered else "-"),
        ("error", (run.error or "-").replace("\n", " ")),
        ("usage", usage_line(followed.usage())),
        ("cost", cost_line(followed.cost())),
        ("created", _when(run.created_at)), ("started", _when(run.started_at)),
        ("finished", _when(run.finished_at)), ("took", took),
    ]
    if run.parent_run_id is not None:
        fields.append(("parent", f"{run.parent_run_id} (its step {run.parent_step})"))
    fields += [("sleeps", f"{s.key} ({s.name}) until {_when(s.waiting.wake_at)}")
               for s in followed.sleeping if s.waiting is not None]
    fields += [("quota", f"{p.step} {' '.join(p.label(now))}") for p in places]
    if children:
        from ackloop.domain.cost import Cost

        spent = Cost.total([n.run.cost for n in children])
        tokens = sum(n.run.usage.total_tokens for n in children)
        fields.append(("children", f"{len(children)} child run(s), ${spent.usd:.6f} of the "
                       f"cost, {tokens} token(s) (their trees included)"))
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        typer.echo(f"{name:<{width}}  {value}")
    typer.echo("")
    table.echo(("STEP", "NAME", "STATUS", "ATTEMPTS", "DURATION", "COST", "ERROR"), [
        (s.key, s.name, s.status.value, str(s.attempts),
         f"{s.completed_at - s.created_at:.3f} s" if s.completed_at else "-",
         f"${s.cost.usd:.6f}" if s.cost else "-",
         (s.last_error or "-").replace("\n", " ")[:ERROR_CHARS]) for s in steps], "no steps")
    if children:
        typer.echo("")
        typer.echo("child runs (agent, run, status, cost, tokens):")
        for line in _tree_lines(children, 1):
            typer.echo(line)


def usage_line(used: Usage) -> str:
    """A run's usage; with child runs, what it used itself and what they used, apart."""
    line = (f"{used.model_calls} model call(s), {used.tool_calls} tool call(s), "
            f"{used.total_tokens} token(s)")
    if used.cached_tokens:
        line += (f"; {used.cached_tokens} of its {used.prompt_tokens} prompt token(s) from "
                 f"Gemini's cache ({cache_share(used.cached_tokens, used.prompt_tokens)})")
    if used.children is None:
        return line
    own, kids = used.own(), used.children
    return (f"{line}: its own {own.model_calls} model call(s), {own.tool_calls} tool call(s), "
            f"{own.total_tokens} token(s); its child runs' {kids.model_calls} model call(s), "
            f"{kids.tool_calls} tool call(s), {kids.total_tokens} token(s)")


def _tree_lines(nodes: list[Node], depth: int) -> list[str]:
    """One line a child run, indented by its depth, each followed by its own children."""
    lines = []
    for node in nodes:
        child = node.run
        cost = f"${child.cost.usd:.6f}" if child.cost else "-"
        lines.append(f"{'  ' * depth}{child.agent}  {child.run_id}  {_status(child)}  {cost}  "
                     f"{child.usage.total_tokens} token(s)")
        lines += _tree_lines(node.children, depth + 1)
    return lines


def _children_json(nodes: list[Node]) -> list[dict[str, Any]]:
    """The API's view of each child run, with its own children under ``children``."""
    from ackloop.api.models import ChildView

    return [ChildView.of(n.step, n.run).model_dump(mode="json")
            | {"children": _children_json(n.children)} for n in nodes]


@app.command("follow")
def follow_run(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id."),
    timeout: float = typer.Option(None, help="Stop waiting after this many seconds "
                                  "(default: until the run ends)."),
    as_json: bool = typer.Option(False, "--json", help="JSON lines: each step, then the end "
                                 "(the API's event stream)."),
    directory: Path = DIRECTORY,
) -> None:
    """Print each step as it completes until the run ends, and the text of the model's answer
    as it is written (not in --json). Exit code 0 only if it answered."""
    from ackloop.api.models import FinishedEvent, StepEvent, StepView

    target = connect(directory)
    live = LiveText(lambda text: typer.echo(text, nl=False))

    def on_step(step: StepRecord) -> None:
        if as_json:
            event = StepEvent(cursor=step.key, run_id=run_id, step=StepView.of(step))
            typer.echo(event.model_dump_json())
        else:
            live.line(step_line(step))

    async def watch() -> Followed:
        await _existing(target, run_id)
        return await follow(target.store(), run_id, timeout=timeout, on_step=on_step,
                            on_delta=None if as_json else live.delta,
                            quotas=None if as_json else target.settings, on_quota=live.line)

    followed = asyncio.run(watch())
    live.end_line()
    run = followed.run
    if as_json:
        if run is not None and run.status.terminal:
            typer.echo(FinishedEvent.of(run).model_dump_json())
    else:
        typer.echo(outcome_line(followed, timeout))
        if followed.answered and run is not None:
            typer.echo(answer_text(run))
    if not followed.answered:
        raise typer.Exit(1)


@app.command("cancel")
def cancel(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Ask a run to stop, as the API's cancel does: a queued run ends at once, a running one at
    its next step boundary. A run that has already ended is left as it is."""
    from ackloop.engine.ending import cancel_run

    target = connect(directory)

    async def request() -> tuple[RunRecord, RunRecord | None]:
        before, _ = await _existing(target, run_id)
        return before, await cancel_run(await target.engine_deps(), run_id)

    before, after = asyncio.run(request())
    run = after or before
    if before.status.terminal:
        outcome, line = "already_ended", f"run {run_id} had already ended: {_status(before)}"
    elif run.status.terminal:
        outcome, line = "cancelled", f"run {run_id} cancelled (it had not started)"
    else:
        outcome, line = "cancel_requested", (f"run {run_id}: cancel requested; it stops at its "
                                             "next step boundary")
    if as_json:
        _emit({"run_id": run_id, "outcome": outcome, "status": run.status.value,
               "cancel_requested": run.cancel_requested})
    else:
        typer.echo(line)


STEP_ARGUMENT: str | None = typer.Argument(
    None, metavar="[STEP]", help="The waiting step's key (default: the run's only waiting step).")
COMMENT_OPTION: str | None = typer.Option(None, "--comment", help="Why; the model reads it.")


@app.command("approve")
def approve(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id."),
    step: str | None = STEP_ARGUMENT,
    args: str | None = typer.Option(None, "--args", help="Run the tool with these arguments "
                                    "(a JSON object) instead of the model's."),
    comment: str | None = COMMENT_OPTION,
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Approve a tool call that waits for a decision: the run resumes and the tool runs."""
    edited = _json_object("--args", args, '{"amount": 30}') if args is not None else None
    _decide(directory, run_id, step, "approve", edited, comment, as_json)


def _json_object(option: str, text: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{option} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CliError(f"{option} must be a JSON object, such as {example}")
    return value


@app.command("reject")
def reject(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id."),
    step: str | None = STEP_ARGUMENT,
    comment: str | None = COMMENT_OPTION,
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Reject a tool call that waits for a decision: the model reads the rejection."""
    _decide(directory, run_id, step, "reject", None, comment, as_json)


def _decide(directory: Path, run_id: str, step: str | None, decision: Literal["approve", "reject"],
            args: dict[str, Any] | None, comment: str | None, as_json: bool) -> None:
    """Record the decision as the API does (first wins) and resume the step. The decider is
    the local user at this host."""
    target = connect(directory)

    async def record() -> tuple[str, StepRecord, bool]:
        _, steps = await _existing(target, run_id)
        waiting = [s.key for s in steps if s.status is StepStatus.WAITING and s.decision is None
                   and s.waiting is not None and s.waiting.kind == "approval"]
        key = step or (waiting[0] if len(waiting) == 1 else None)
        if key is None:
            raise CliError(f"run {run_id} has {len(waiting)} waiting steps"
                           + (f" ({', '.join(waiting)}): name one" if waiting else ""))
        recorded, decided = await record_decision(await target.engine_deps(), run_id, key, decision,
                                                  args, comment)
        return key, recorded, decided

    key, recorded, decided = asyncio.run(record())
    final = recorded.decision
    if as_json:
        _emit({"run_id": run_id, "step": key, "recorded": decided,
               **(final.model_dump(mode="json") if final else {})})
        return
    verb = "approved" if decision == "approve" else "rejected"
    typer.echo(f"run {run_id} step {key} {verb}; the run resumes" if decided else
               f"run {run_id} step {key} was already {verb} by "
               f"{final.by if final else '?'}; nothing changed")


async def record_decision(deps: Deps, run_id: str, step: str,
                          decision: Literal["approve", "reject"], args: dict[str, Any] | None,
                          comment: str | None) -> tuple[StepRecord, bool]:
    """Record the local user's decision on a call that waits for approval, as the API does
    (first wins), and resume its step: the step as recorded, and whether this decision was the
    one recorded (a refusal is a :class:`CliError` saying why)."""
    from ackloop.domain.records import StepDecision
    from ackloop.engine.waits import core as waits
    from ackloop.store import DecisionRefused

    made = StepDecision(decision=decision, args=args, comment=comment, by=_local_user(),
                        at=deps.clock.now())
    try:
        return await waits.resolve(deps, run_id, step, made, "approval")
    except DecisionRefused as exc:
        raise CliError(str(exc)) from exc


@app.command("send-event")
def send_event(
    run_id: str = typer.Argument(..., metavar="RUN", help="The run's id."),
    name: str = typer.Argument(..., metavar="NAME", help="The event's name."),
    payload: str = typer.Option("{}", "--payload", help="What the event carries (a JSON "
                                "object); the waiting tool reads it."),
    event_id: str | None = typer.Option(None, "--id", help="Your id for the event: sending it "
                                        "again with the same id and payload is a repeat."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Send a named event to a run: the calls waiting for it resume with its payload (one that
    arrives first is kept until a call waits for it)."""
    from pydantic import ValidationError

    from ackloop.domain.records import ReceivedEvent
    from ackloop.domain.wire import EventMessage
    from ackloop.engine.waits import arrivals
    from ackloop.store import DecisionRefused

    body = _json_object("--payload", payload, '{"paid": true}')
    try:
        message = EventMessage(type="event", run_id=run_id, name=name, payload=body,
                               id=event_id)
    except ValidationError as exc:
        raise CliError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                 for e in exc.errors())) from exc
    target = connect(directory)

    async def deliver() -> arrivals.Delivered:
        await _existing(target, run_id)
        deps = await target.engine_deps()
        event = ReceivedEvent(payload=message.payload, by=_local_user(), at=deps.clock.now(),
                              id=message.id)
        try:
            return await arrivals.deliver(deps, run_id, name, event)
        except DecisionRefused as exc:
            raise CliError(str(exc)) from exc

    delivered = asyncio.run(deliver())
    if as_json:
        _emit({"run_id": run_id, "event": name, "recorded": delivered.recorded,
               "resumed": delivered.resumed, **delivered.event.model_dump(mode="json")})
        return
    resumed = ", ".join(delivered.resumed)
    if delivered.recorded:
        done = f"resumed {resumed}" if resumed else "kept until a call waits for it"
        typer.echo(f"run {run_id} received event {name!r}; {done}")
    else:
        done = f"re-sent {resumed}" if resumed else "nothing changed"
        typer.echo(f"run {run_id} had already received this event {name!r}; {done}")


def _local_user() -> str:
    """Who decides or sends from the CLI: the local user at this host."""
    import getpass
    import socket

    return f"{getpass.getuser()}@{socket.gethostname()}"


@app.command("dead-letters")
def dead_letters(
    run: str = typer.Option(None, help="Only this run's dead letters."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """List dead letters not re-driven yet, with their cause."""
    from ackloop.engine.redrive import pending_dead_letters

    target = connect(directory)
    records = asyncio.run(pending_dead_letters(target.store(), run_id=run))
    if as_json:
        _emit({"dead_letters": records})
        return
    table.echo(("MESSAGE", "RUN", "STEP", "ORIGIN", "CAUSE"), [
        (str(r["message_id"]), str(r.get("run_id")), str(r.get("step")), str(r.get("origin")),
         str(r.get("cause")).replace("\n", " ")[:ERROR_CHARS]) for r in records],
        "no dead letters waiting")


@app.command("redrive")
def redrive_command(
    run: str = typer.Option(None, help="Only this run's dead letters."),
    message: list[str] = typer.Option([], help="Only these dead-letter message ids."),
    dry_run: bool = typer.Option(False, help="Show what would be re-driven."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Re-publish dead-lettered messages to their topic once the cause is fixed.

    A run that failed by dead-lettering is reopened first; the step's claim keeps it from
    running twice.
    """
    from ackloop.domain.clock import SystemClock
    from ackloop.engine.redrive import redrive

    target = connect(directory)
    publisher = target.publisher()
    try:
        results = asyncio.run(redrive(target.store(), publisher, target.settings, SystemClock(),
                                      run_id=run, message_ids=message, dry_run=dry_run))
    finally:
        publisher.close()
    _print_redriven(results, as_json)
    if any(r.outcome == "conversation_busy" for r in results):
        raise typer.Exit(1)


def _print_redriven(results: list[Redriven], as_json: bool) -> None:
    if as_json:
        _emit({"redriven": [{"message_id": r.message_id, "run_id": r.run_id, "step": r.step,
                             "outcome": r.outcome} for r in results]})
        return
    table.echo(("MESSAGE", "RUN", "STEP", "OUTCOME"),
               [(r.message_id, str(r.run_id), str(r.step), r.outcome) for r in results],
               "nothing to re-drive")


@app.command("sweep")
def sweep_command(
    stale_seconds: float = typer.Option(
        None, help="Idle time after which a running run is resumed "
        "(default: ACKLOOP_SWEEP_STALE_SECONDS)."),
    as_json: bool = JSON_OPTION,
    directory: Path = DIRECTORY,
) -> None:
    """Resume runs that stopped moving, from their ledger; fail those that cannot be resumed.

    Safe at any time: a re-sent step message is absorbed by the step's claim.
    """
    from ackloop.engine.sweep import Swept, sweep

    target = connect(directory)

    async def swept() -> list[Swept]:
        return await sweep(await target.engine_deps(), stale_after=stale_seconds)

    results = asyncio.run(swept())
    if as_json:
        _emit({"swept": [{"run_id": s.run_id, "action": s.action, "detail": s.detail}
                         for s in results]})
        return
    table.echo(("RUN", "ACTION", "DETAIL"), [(s.run_id, s.action, s.detail) for s in results],
               "no stalled runs")
