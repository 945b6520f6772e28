"""``ackloop dev``, ``ackloop bench`` and ``ackloop chaos`` come from the development tools
(``ackloop-dev``) through the ``ackloop.commands`` entry points; without them, the CLI says what
to install."""

from __future__ import annotations

import re
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


def _listed(help_text: str) -> list[str]:
    """The command names of a ``--help`` listing (the first word of each row of its table)."""
    return re.findall(r"^\W+ ([a-z][a-z-]*)  ", help_text, flags=re.MULTILINE)


@pytest.mark.parametrize(("command", "option"),
                         [("dev", "status"), ("bench", "--temporal"), ("chaos", "--quick")])
def test_the_dev_commands_come_from_the_installed_dev_tools(command: str, option: str) -> None:
    done = _ackloop(command, "--help")
    assert done.returncode == 0, done.stderr
    assert option in done.stdout
    listing = _ackloop("--help")
    assert command in _listed(listing.stdout)


def test_the_listing_names_the_lazy_command_groups() -> None:
    # A group loaded on demand (dev, runs) is listed by its name, not as a blank row.
    listed = _listed(_ackloop("--help").stdout)
    assert {"dev", "runs", "ask", "run", "serve", "bench", "chaos"} <= set(listed)


@pytest.mark.parametrize(("command", "args"), [("dev", ["up"]), ("bench", ["--quick"]),
                                               ("chaos", ["--quick"])])
def test_without_the_dev_tools_a_dev_command_names_what_to_install(
        command: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lazy, "_entry_points", dict)
    result = CliRunner().invoke(app, [command, *args])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [f"ackloop {command} comes with the development tools, ackloop-dev: "
                     "pip install -e CHECKOUT/devtools, or pip install --find-links "
                     "CHECKOUT/dist ackloop-dev after make dist in the checkout"]
    assert command not in CliRunner().invoke(app, ["--help"]).output.split("Commands")[1]


def test_an_unknown_command_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.output
