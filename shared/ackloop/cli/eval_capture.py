"""``ackloop eval capture RUN_ID...``: recorded runs as cases that replay them.

Each run becomes a case: its question and agent, its cassette (every model turn and tool
result of it and of the runs below it: :mod:`ackloop.evals.cassette`) and the checks that hold
while nothing changed: it ends as it ended, makes the same calls in the same order, and gives
the same answer. ``ackloop eval cases.yaml`` then replays them in process: no model is called
and no tool runs.
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
        instructions = _instructions(agents, http)
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


def _instructions(agents: str | None, http: Any) -> Any:
    """An agent's instructions now, from the catalog where it loads here (else unknown: a
    replay then does not compare them)."""
    import os

    from ackloop.agents.catalog import CatalogError, load_agents
    from ackloop.config.settings import Settings

    if agents:
        os.environ["ACKLOOP_AGENTS"] = agents
    try:
        found = {a.name: a.instructions for a in load_agents(Settings(), http)}
    except CatalogError:
        found = {}
    return found.get
