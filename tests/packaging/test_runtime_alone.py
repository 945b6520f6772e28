"""``ackloop runs`` and ``ackloop ask`` find a local stack with the runtime alone: the state file
``ackloop dev up`` writes is read by :mod:`ackloop.testing.localstack`, not by the development
tools."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ackloop.testing.localstack import StackState
from tests.support.emulators import EmulatorSession

pytestmark = pytest.mark.emulator

# The CLI in a process where importing the development tools fails, as without ackloop-dev.
WITHOUT_DEV_TOOLS = ("import sys; sys.modules['ackloop_dev'] = None; "
                     "from ackloop.cli.main import app; app()")


def test_runs_list_reads_the_stack_state_without_the_dev_tools(
        emulator_session: EmulatorSession, tmp_path: Path) -> None:
    prefix = emulator_session.unique("alone").replace("-", "_") + "_"
    StackState(str(tmp_path), emulator_session.project_id, emulator_session.pubsub_port,
               emulator_session.firestore_port,
               env={"ACKLOOP_COLLECTION_PREFIX": prefix}).save()
    # Only the state file names the emulators: none in the environment.
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_EMULATOR_HOST") and not k.startswith("ACKLOOP_")}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_DEV_TOOLS, "runs", "list", "--directory", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # The stack's emulators and collections were found (not a deployment, not an error).
    assert done.stdout.strip().lower() == "no runs"
    assert done.stderr == ""
