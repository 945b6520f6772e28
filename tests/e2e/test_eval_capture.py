"""``ackloop eval capture`` of a run on a stack that serves a catalog of the user's (``dev up
--agents``), run as the docs show it (no ``--agents``): the case records the instructions the
stack serves, so its replay passes against them and stops against changed ones; where nothing
says which catalog served a run, the capture says so, and refuses a catalog without its agent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ackloop.cli.errors import CliError
from ackloop.cli.eval_capture import capture_runs
from ackloop.evals import EvalRunner, load_dataset
from ackloop.evals.cassette import instructions_digest
from tests.cli.conftest import Cli
from tests.evals import capture_catalog
from tests.evals.capture_catalog import INSTRUCTIONS
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator]

CATALOG = "tests.evals.capture_catalog"


async def test_a_capture_records_the_instructions_the_stack_serves(
        fresh_stack: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    running: RunningStack = fresh_stack(agents=f"{CATALOG}:catalog")  # type: ignore[operator]
    run_id = running.ask("where is C-3?", agent="capture-desk")
    run, _ = await running.wait_run(run_id)
    assert run.status.value == "completed", run
    home = tmp_path / "home"
    home.mkdir()
    cli = Cli(home)
    captured = tmp_path / "captured.yaml"
    out = cli("eval", "capture", run_id, "--directory", running.state.directory,
              "--output", str(captured))
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr, out.stderr
    (case,) = yaml.safe_load(captured.read_text())["cases"]
    (recorded,) = case["inputs"]["cassette"]["runs"].values()
    assert recorded["instructions_sha256"] == instructions_digest(INSTRUCTIONS)

    # Replayed in process, against the catalog as served, then reworded.
    dataset = load_dataset(captured)
    same = await EvalRunner(agents=capture_catalog.catalog).run(dataset)
    assert same.passed, same.cases[0].failures()
    changed = await EvalRunner(agents=capture_catalog.reworded).run(dataset)
    assert not changed.passed
    (status,) = [c for c in changed.cases[0].failures() if c.name == "status"]
    assert "agent 'capture-desk''s instructions changed since it was recorded" in str(
        status.reason)

    # Through the API alone, nothing here says which catalog served the run: the capture says
    # so; a catalog without the run's agent is refused.
    monkeypatch.delenv("ACKLOOP_AGENTS", raising=False)
    url = running.state.api_url
    await capture_runs([run_id], tmp_path / "by-url.yaml", directory=tmp_path / "none",
                       url=url, token=None, agents=None)
    assert "warning: no catalog names the runs' agents here" in capsys.readouterr().err
    builtin = "ackloop.agents.builtin:builtin_agents"
    with pytest.raises(CliError, match=f"run {run_id}'s agent 'capture-desk' is not in the "
                                       f"catalog {builtin}"):
        await capture_runs([run_id], tmp_path / "wrong.yaml", directory=tmp_path / "none",
                           url=url, token=None, agents=builtin)
    # A catalog named in process is read from it, not put into this process's environment
    # (where every stack started later in the process would serve it).
    assert "ACKLOOP_AGENTS" not in os.environ
