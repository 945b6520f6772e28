"""The container's ``ackloop run`` (options in the environment) starts without the command line;
anything else, and a ``run`` the command line would refuse, goes through it as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ackloop.cli.entry import container_run

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"


def _env(**values: str) -> dict[str, str]:
    return {"ACKLOOP_FUNCTIONS_DIR": str(FUNCTIONS), **values}


def test_the_container_run_needs_no_command_line() -> None:
    assert container_run(["run"], _env(FUNCTION_TARGET="tool_step", PORT="8081",
                                       ACKLOOP_HOST="127.0.0.1")) == {
        "target": "tool_step", "sources": {"tool_step": FUNCTIONS / "tool_step" / "main.py"},
        "host": "127.0.0.1", "port": 8081}


def test_its_defaults_are_the_run_commands() -> None:
    options = container_run(["run"], {"FUNCTION_TARGET": "api"})
    assert options == {"target": "api", "sources": {}, "host": "0.0.0.0", "port": 8080}


@pytest.mark.parametrize(("args", "env"), [
    ([], _env(FUNCTION_TARGET="ingest")),
    (["run", "--port", "9000"], _env(FUNCTION_TARGET="ingest")),
    (["run", "--help"], _env(FUNCTION_TARGET="ingest")),
    (["serve"], _env()),
    (["run"], _env()),  # no target
    (["run"], _env(FUNCTION_TARGET="bogus")),
    (["run"], _env(FUNCTION_TARGET="ingest", PORT="eighty")),
    (["run"], _env(FUNCTION_TARGET="ingest", PORT="-1")),
    (["run"], _env(FUNCTION_TARGET="ingest", PORT="")),  # click reads it as unset
    (["run"], _env(FUNCTION_TARGET="ingest", ACKLOOP_HOST="")),
    (["run"], {"FUNCTION_TARGET": "ingest", "ACKLOOP_FUNCTIONS_DIR": "/nonexistent"}),
])
def test_anything_else_goes_to_the_command_line(args: list[str], env: dict[str, str]) -> None:
    assert container_run(args, env) is None


def test_a_run_the_command_line_refuses_is_refused_as_before() -> None:
    exe = shutil.which("ackloop", path=str(Path(sys.executable).parent))
    assert exe, "the ackloop console script is installed next to this interpreter"
    done = subprocess.run([exe, "run"], env={**os.environ, "FUNCTION_TARGET": "bogus"},
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "FUNCTION_TARGET must be one of" in done.stderr
