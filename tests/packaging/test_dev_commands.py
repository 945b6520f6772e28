"""``ackloop bench`` and ``ackloop chaos`` come from the development tools (``ackloop-dev``)
through the ``ackloop.commands`` entry points; without them, the CLI says what to install."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ackloop.cli import lazy
from ackloop.cli.main import app


def _ackloop(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ackloop", path=str(Path(sys.executable).parent))
    assert exe, "the ackloop console script is installed next to this interpreter"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("command", "option"), [("bench", "--temporal"), ("chaos", "--quick")])
def test_the_dev_commands_come_from_the_installed_dev_tools(command: str, option: str) -> None:
    done = _ackloop(command, "--help")
    assert done.returncode == 0, done.stderr
    assert option in done.stdout
    listing = _ackloop("--help")
    assert command in listing.stdout


@pytest.mark.parametrize("command", ["bench", "chaos"])
def test_without_the_dev_tools_a_dev_command_names_what_to_install(
        command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lazy, "_entry_points", dict)
    result = CliRunner().invoke(app, [command, "--quick"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [f"ackloop {command} comes with the development tools: "
                     "pip install ackloop-dev"]
    assert command not in CliRunner().invoke(app, ["--help"]).output.split("Commands")[1]


def test_an_unknown_command_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.output
