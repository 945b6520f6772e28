"""``ackloop eval`` as a user runs it, a real process in a user's shell (no PYTHONPATH, no
ackloop settings): the tutorial's command from the tutorial's directory, and a dataset whose
check is misnamed or given an argument it does not take."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cli.conftest import ACKLOOP, user_env

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL_APP = ROOT / "examples" / "expense_desk"


def _ackloop(args: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in user_env(home).items() if k != "PYTHONPATH"}
    return subprocess.run([ACKLOOP, *args], capture_output=True, text=True, timeout=180,
                          env=env, cwd=cwd)


def _tutorial_command() -> list[str]:
    """The first command of the tutorial's "Run it", as the page shows it."""
    page = (ROOT / "docs" / "tutorial" / "evals.md").read_text()
    run_it = page.split("## Run it", 1)[1]
    command = re.search(r"```bash\n(ackloop eval [^\n]*)\n```", run_it)
    assert command is not None, "the tutorial's eval command is gone"
    return shlex.split(command.group(1))


def test_the_tutorials_eval_command_passes_from_the_tutorials_directory(tmp_path: Path) -> None:
    index = (ROOT / "docs" / "tutorial" / "index.md").read_text()
    assert "cd examples/expense_desk" in index  # where the tutorial says to be
    command = _tutorial_command()
    assert command[:2] == ["ackloop", "eval"] and "--agents" in command
    ran = _ackloop(command[1:], TUTORIAL_APP, tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "6 of 6 run(s) passed (100%)" in ran.stdout


def _dataset(tmp_path: Path, check: object) -> Path:
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "cases": [
        {"name": "alerts", "inputs": "any alerts?", "evaluators": [check]}]}))
    return path


@pytest.mark.parametrize(("check", "said"), [
    ({"Contain": "Norman"},
     "error: cases.yaml: not a dataset: case 'alerts': no check is named 'Contain' (did you "
     "mean 'Contains'?); the checks are: ArgumentCorrectness, Budget, Children, Contains, "),
    ({"Trajectory": {"calls": ["get_weather_alerts"], "mood": "exact"}},
     "error: cases.yaml: not a dataset: case 'alerts': check Trajectory takes no argument "
     "'mood'; it takes: calls, mode, forbidden\n"),
    ({"Trajectory": {"calls": ["get_weather_alerts"], "mode": "sometimes"}},
     "error: cases.yaml: not a dataset: Failed to instantiate evaluator 'Trajectory' for case "
     "'alerts': trajectory mode 'sometimes'; known: exact, in_order, any_order\n"),
])
def test_a_bad_check_in_a_dataset_is_named_with_what_it_could_be(
        tmp_path: Path, check: object, said: str) -> None:
    _dataset(tmp_path, check)
    ran = _ackloop(["eval", "cases.yaml", "--in-process"], tmp_path, tmp_path)
    assert ran.returncode == 1
    assert ran.stderr.startswith(said), ran.stderr
    assert "sub-exception" not in ran.stderr
