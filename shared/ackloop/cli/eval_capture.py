"""``ackloop eval capture RUN_ID...``: recorded runs as cases that replay them.

Each run becomes a case: its question and agent, its cassette (every model turn and tool
result of it and of the runs below it: :mod:`ackloop.evals.cassette`) and the checks that hold
while nothing changed: it ends as it ended, makes the same calls in the same order, and gives
the same answer. ``ackloop eval cases.yaml`` then replays them in process: no model is called
and no tool runs.

Each case records a digest of its agents' instructions, those of the catalog the runs'
deployment serves: ``--agents``, else the catalog the local stack in ``--directory`` serves (as
its state records it), else ``ACKLOOP_AGENTS``. A replay whose agents' instructions differ then
stops at its first model step and says so. Where none names the catalog, the capture says it
records no instructions; a catalog that has no agent of a run is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ackloop.cli.errors import CliError


async def capture_runs(run_ids: list[str], output: Path, *, directory: Path, url: str | None,
                       token: str | None, agents: str | None) -> None:
    import httpx
    from pydantic_evals import Case

    from ackloop.evals.cases import EvalDataset, EvalInputs, checks
    from ackloop.evals.targets import HttpTarget, store_view

    if output.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise CliError(f"--output {output}: a dataset is written as .yaml or .json")
    async with httpx.AsyncClient() as http:
        instructions = _instructions(*_served_catalog(agents, directory, url), http)
        if url is not None:
            remote = HttpTarget(url, token)
            read: Any = remote.view
        else:
            from ackloop.cli.target import connect

            deps = await connect(directory).engine_deps()

            async def read(run_id: str) -> Any:
                return await store_view(deps, run_id)

        cases = []
        for run_id in run_ids:
            view = await read(run_id)
            if view is None:
                raise CliError(f"no run {run_id}")
            _known(view, instructions)
            cases.append(case_of(view, instructions))
            typer.echo(f"captured {run_id} ({view['agent']}, {view['status']})", err=True)
        if url is not None:
            await remote.aclose()
    dataset = EvalDataset(name=output.stem, cases=[Case(**c) for c in cases])
    # Validated as a load would read it, so a written file always loads.
    for case in dataset.cases:
        EvalInputs.model_validate(case.inputs)
    output.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_file(output, schema_path=None, custom_evaluator_types=checks())
    typer.echo(f"wrote {len(cases)} case(s) to {output}", err=True)


def case_of(view: dict[str, Any], instructions: Any) -> dict[str, Any]:
    """The case of a run's view tree: replays it, and checks it goes as recorded."""
    from ackloop.evals.cases import EvalInputs
    from ackloop.evals.cassette import capture
    from ackloop.evals.checks import Status, Trajectory
    from ackloop.evals.facts import run_facts

    if view.get("status") not in ("completed", "failed", "cancelled"):
        raise CliError(f"run {view['run_id']} has not ended ({view.get('status')}): capture "
                       "takes runs that have")
    if view.get("files"):
        raise CliError(f"run {view['run_id']} was asked with files, which a capture does not "
                       "carry: replay it from a case that names them")
    facts = run_facts(view)
    evaluators: list[Any] = [
        Status(status=facts.status, stop_reason=facts.stop_reason),
        Trajectory(calls=[{"name": c.name, "args": c.args} for c in facts.calls],
                   mode="exact")]
    expected = facts.result()
    if expected is not None:
        from pydantic_evals.evaluators import EqualsExpected

        evaluators.append(EqualsExpected())
    return {"name": f"{view['agent']}-{view['run_id']}",
            "inputs": EvalInputs(question=view["text"], agent=view["agent"],
                                 cassette=capture(view, instructions)),
            "expected_output": expected, "evaluators": evaluators}


def _served_catalog(agents: str | None, directory: Path, url: str | None
                    ) -> tuple[str | None, list[str]]:
    """The catalog the runs' deployment serves and the directories it is imported from:
    ``--agents`` (from here), else the local stack's (unless ``--url`` names another), else
    ``ACKLOOP_AGENTS``; None when nothing here says."""
    import os

    from ackloop.testing.localstack import StackState

    if agents:
        return agents, []
    if url is None:
        try:
            state = StackState.load(directory)
        except (OSError, ValueError, TypeError):
            state = None
        if state is not None and state.agents:
            return state.agents, state.python_path
    return os.environ.get("ACKLOOP_AGENTS") or None, []


def _instructions(source: str | None, path: list[str], http: Any) -> Any:
    """An agent's name -> its instructions in the catalog ``source`` (imported with ``path``
    first); with no source, a warning and nothing known (the cases then record none)."""
    import sys

    from ackloop.agents.catalog import CatalogError, load_agents
    from ackloop.config.settings import Settings

    if source is None:
        typer.echo("warning: no catalog names the runs' agents here (no --agents, no stack "
                   "in --directory, no ACKLOOP_AGENTS): the cases record no instructions, so "
                   "their replay will not notice that an agent's instructions changed; give "
                   "--agents, the catalog the deployment serves", err=True)
        return lambda name: None
    sys.path[:0] = [p for p in path if p not in sys.path]
    try:
        found = {a.name: a.instructions for a in load_agents(Settings(agents=source), http)}
    except CatalogError as exc:
        raise CliError(f"the runs' instructions: {exc}") from exc
    return _Catalog(source, found)


class _Catalog:
    """The instructions of a catalog's agents, by name, and where they come from."""

    def __init__(self, source: str, instructions: dict[str, str]) -> None:
        self.source = source
        self.instructions = instructions

    def __call__(self, name: str) -> str | None:
        return self.instructions.get(name)


def _known(view: dict[str, Any], instructions: Any) -> None:
    """Refuse a run (or a run below it) whose agent the catalog does not have: it is not the
    catalog the run was served by, and the case would record no instructions for it."""
    if isinstance(instructions, _Catalog) and view["agent"] not in instructions.instructions:
        has = ", ".join(sorted(instructions.instructions))
        raise CliError(f"run {view['run_id']}'s agent {view['agent']!r} is not in the catalog "
                       f"{instructions.source} (it has {has}): give --agents, the catalog "
                       "that served it")
    for child in (view.get("child_views") or {}).values():
        _known(child, instructions)
