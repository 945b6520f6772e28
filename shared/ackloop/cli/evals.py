"""``ackloop eval``: run a dataset's cases as real runs and report; capture runs as cases.

``ackloop eval DATASET`` runs each case (each repetition) as a run of the local stack in
``--directory`` (else of the deployment the environment names, as ``ackloop ask`` does), of a
deployment's HTTP API (``--url``) or of the engine in this process (``--in-process``), at most
``--concurrency`` at a time; prints a table, writes the JSON, JUnit XML and Markdown reports
asked for, stores the report for the inspector's eval page, and exits 1 when a case failed or
the report is worse than ``--baseline``. ``ackloop eval capture RUN_ID...`` writes recorded
runs as cases that replay them (``--output``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import typer

from ackloop.cli.errors import CliError
from ackloop.cli.target import DIRECTORY

FAILED_EXIT = 1


def eval_command(
    arguments: list[str] = typer.Argument(
        ..., metavar="DATASET | capture RUN_ID...",
        help="A dataset (.yaml, .json, a .py file or module:attribute defining a Pydantic "
        "Evals Dataset), or `capture` and the runs to write as replayable cases."),
    in_process: bool = typer.Option(False, "--in-process", help="Run the cases on the engine "
                                    "in this process (in-memory store) instead of a stack."),
    url: str = typer.Option(None, "--url", help="A deployment's HTTP API to run the cases on."),
    token: str = typer.Option(None, "--token", envvar="ACKLOOP_API_TOKEN",
                              help="The bearer token --url asks for."),
    agents: str = typer.Option(None, "--agents", help="The agent catalog for --in-process, "
                               "replays and capture (package.module:attribute, imported from "
                               "the current directory first; default: ACKLOOP_AGENTS; capture: "
                               "the local stack's)."),
    concurrency: int = typer.Option(8, min=1, help="Cases running at once."),
    repeat: int = typer.Option(1, min=1, help="Runs of each case (pass@k, pass^k)."),
    timeout: float = typer.Option(300.0, help="Seconds a case's run may take."),
    eval_id: str = typer.Option(None, "--eval-id", help="The eval's id (default: a new one). "
                                "The same id again finds the runs it started: none runs twice."),
    json_path: Path = typer.Option(None, "--json", help="Write the report as JSON."),
    junit_path: Path = typer.Option(None, "--junit", help="Write JUnit XML (for CI)."),
    markdown_path: Path = typer.Option(None, "--markdown", help="Write Markdown."),
    baseline: Path = typer.Option(None, "--baseline", help="A JSON report to compare with: "
                                  "a lower score or pass rate, or a regressed case, fails."),
    score_drop: float = typer.Option(0.0, "--max-score-drop",
                                     help="How far the score may fall below the baseline's."),
    cost_increase: float = typer.Option(None, "--max-cost-increase", help="How much more the "
                                        "runs may cost than the baseline's (0.1: 10%)."),
    store: bool = typer.Option(True, "--store/--no-store",
                               help="Keep the report for the inspector's eval page."),
    output: Path = typer.Option(None, "--output", "-o",
                                help="capture: the dataset file to write (.yaml or .json)."),
    directory: Path = DIRECTORY,
) -> None:
    """Evaluate an agent: run a dataset's cases as real runs, check and score them, report."""
    try:
        import pydantic_evals  # noqa: F401
    except ImportError as exc:
        from ackloop.evals import EXTRA_HINT

        raise CliError(EXTRA_HINT) from exc
    _project_importable()
    if arguments[0] == "capture":
        if len(arguments) < 2 or output is None:
            raise CliError("usage: ackloop eval capture RUN_ID... --output cases.yaml")
        from ackloop.cli.eval_capture import capture_runs

        asyncio.run(capture_runs(arguments[1:], output, directory=directory, url=url,
                                 token=token, agents=agents))
        return
    if len(arguments) != 1:
        raise CliError("give one dataset (or `capture RUN_ID...`)")
    if sum((in_process, url is not None)) > 1:
        raise CliError("--in-process and --url name two targets: choose one")
    from ackloop.domain.eval_reports import EvalReport

    before = EvalReport.model_validate_json(baseline.read_text()) if baseline else None
    report = asyncio.run(_run(arguments[0], Options(
        in_process=in_process, url=url, token=token, agents=agents, concurrency=concurrency,
        repeat=repeat, timeout=timeout, eval_id=eval_id, store=store, directory=directory)))
    _write(report, json_path, junit_path, markdown_path)
    problems = []
    if before is not None:
        from ackloop.domain.eval_reports import compare

        problems = compare(report, before, score_drop=score_drop, cost_increase=cost_increase)
        for line in problems:
            typer.echo(f"worse than the baseline: {line}", err=True)
    if not report.passed or problems:
        raise typer.Exit(FAILED_EXIT)


def _project_importable() -> None:
    """The current directory first on the import path, as ``ackloop dev up`` puts it on its
    functions' PYTHONPATH and a project's pytest on its tests' (``pythonpath = ["."]``), so
    that ``--agents myapp.agents:catalog`` and a dataset ``myapp.evals:dataset`` import the
    project the command is run from (a console script has only its own directory there)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


class Options:
    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    in_process: bool
    url: str | None
    token: str | None
    agents: str | None
    concurrency: int
    repeat: int
    timeout: float
    eval_id: str | None
    store: bool
    directory: Path


async def _run(dataset_source: str, options: Options) -> Any:
    import httpx

    from ackloop.evals.cases import DatasetError, load_dataset
    from ackloop.evals.render import terminal
    from ackloop.evals.runner import EvalRunner, new_eval_id

    try:
        dataset = load_dataset(dataset_source)
    except Exception as exc:  # a file that is not a dataset: say which and why
        why = "; ".join(exc.problems) if isinstance(exc, DatasetError) else exc
        raise CliError(f"{dataset_source}: not a dataset: {why}") from exc
    replays = any(case.inputs.cassette is not None for case in dataset.cases)
    async with httpx.AsyncClient() as http:
        target, save = await _target(options, http)
        catalog = (_catalog(options.agents, http)
                   if options.in_process or replays else None)
        runner = EvalRunner(target=target, agents=catalog, model=_model(catalog, options),
                            concurrency=options.concurrency, repeat=options.repeat,
                            timeout=options.timeout)
        eval_id = options.eval_id or new_eval_id()
        where = target.label if target else "the engine in process"
        typer.echo(f"eval {eval_id}: {len(dataset.cases)} case(s), {options.repeat} run(s) "
                   f"each, on {where}", err=True)
        report = await runner.run(dataset, eval_id=eval_id, source=dataset_source)
        typer.echo(terminal(report))
        if save is not None and options.store:
            await save(report)
        closing = getattr(target, "aclose", None)
        if closing is not None:
            await closing()
    return report


async def _target(options: Options, http: Any) -> tuple[Any, Any]:
    """The target the options name, and how to keep its report (None: nowhere)."""
    from ackloop.evals.targets import HttpTarget, StoreTarget

    if options.in_process:
        _stack_settings(options.directory)
        return None, None
    if options.url is not None:
        remote = HttpTarget(options.url, options.token, label=f"http {options.url}")

        async def put(report: Any) -> None:
            await remote._call("PUT", f"/evals/{report.eval_id}",
                               report.model_dump(mode="json"))

        return remote, put
    from ackloop.cli.target import connect
    from ackloop.docdb.counting import CountingDocumentDB
    from ackloop.docdb.firestore import FirestoreDocumentDB
    from ackloop.store import AgentStore, Retention

    target = connect(options.directory)
    settings = target.settings
    # The eval's own reads are counted: what following its runs costs is the eval's cost.
    db = CountingDocumentDB(FirestoreDocumentDB.connect(settings.project_id,
                                                        settings.firestore_database))
    deps = dataclasses.replace(await target.engine_deps(), store=AgentStore(
        db, settings.collection_prefix, Retention.from_settings(settings)))
    where = target.stack.api_url if target.stack is not None else None
    label = (f"local stack {options.directory}" if target.stack is not None
             else f"project {target.settings.project_id}")

    async def keep(report: Any) -> None:
        await deps.store.evals.put_report(report, owner=LOCAL_OWNER)

    return StoreTarget(deps=deps, label=label, inspector=where, counters=db.counters), keep


def _stack_settings(directory: Path) -> None:
    """In process, the settings of the stack in ``directory`` when there is one (its agent
    catalog, its tools' API addresses), as its functions have them."""
    from ackloop.testing.localstack import StackState

    try:
        state = StackState.load(directory)
    except (OSError, ValueError, TypeError):
        return
    if state is not None:
        os.environ.update({k: v for k, v in state.env.items() if k.startswith("ACKLOOP_")})


LOCAL_OWNER = "anonymous"
"""Whose reports the CLI keeps in the store: the inspector's caller when auth is off."""


def _catalog(source: str | None, http: Any) -> list[Any]:
    from ackloop.agents.catalog import CatalogError, load_agents
    from ackloop.config.settings import Settings

    try:  # the environment's ACKLOOP_AGENTS unless a source is given; the environment unchanged
        return load_agents(Settings(agents=source) if source else Settings(), http)
    except CatalogError as exc:
        raise CliError(str(exc)) from exc


def _model(catalog: list[Any] | None, options: Options) -> Any:
    """Gemini where the settings configure it, else None (each agent's own script)."""
    if catalog is None or not options.in_process:
        return None
    from ackloop.agents.agent import AgentRegistry
    from ackloop.config.settings import Settings
    from ackloop.hosting.runtime import build_model

    settings = Settings()
    if settings.resolved_model_provider() != "gemini":
        return None
    return build_model(settings, AgentRegistry(catalog))


def _write(report: Any, json_path: Path | None, junit_path: Path | None,
           markdown_path: Path | None) -> None:
    from ackloop.evals.render import junit, markdown

    for path, text in ((json_path, lambda: report.model_dump_json(indent=2)),
                       (junit_path, lambda: junit(report)),
                       (markdown_path, lambda: markdown(report))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text())
            typer.echo(f"wrote {path}", err=True)
