"""Known conditions end every command in one line on stderr and exit code 1, never a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ackloop.testing.localstack import StackState
from tests.cli.conftest import Cli

# Every command that talks to a deployment or a stack.
COMMANDS = [("ask", "hi"), ("runs", "list"), ("runs", "show", "run-x"),
            ("runs", "follow", "run-x"), ("runs", "cancel", "run-x"),
            ("runs", "dead-letters"), ("runs", "redrive"), ("runs", "sweep")]


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_no_stack_and_no_credentials(cli: Cli, command: tuple[str, ...]) -> None:
    ran = cli(*command, "--directory", "nowhere")
    assert ran.returncode == 1
    assert _error_line(ran.stderr) == (
        "error: no local stack in nowhere and no Google Cloud credentials: start one with "
        "`ackloop dev up` (or name its directory with --directory), or run "
        "`gcloud auth application-default login` to use a deployment")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_stack_whose_emulators_are_down(cli: Cli, tmp_path: Path,
                                          command: tuple[str, ...]) -> None:
    port = _closed_port()
    StackState(str(tmp_path), "ackloop-local", port, port).save()
    ran = cli(*command, "--directory", str(tmp_path))
    assert ran.returncode == 1
    line = _error_line(ran.stderr)
    assert line.startswith(f"error: the Pub/Sub emulator at 127.0.0.1:{port} is not reachable")
    assert line.endswith(f"named by the stack in {tmp_path} (`ackloop dev status --directory "
                         f"{tmp_path}`): is the stack up?")


def test_a_state_file_that_is_not_one(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    ran = cli("runs", "list", "--directory", str(tmp_path))
    assert ran.returncode == 1
    assert _error_line(ran.stderr).startswith(f"error: {tmp_path / 'state.json'} is not a "
                                              "stack's state")


def test_a_question_that_is_not_valid(cli: Cli) -> None:
    ran = cli("ask", "hi", "--agent", "no spaces allowed")
    assert ran.returncode == 1
    assert _error_line(ran.stderr).startswith("error: not a valid question: agent: ")
