"""``dev up --reuse-emulators``: the ackloop processes on emulators that outlive them, as
Google's services outlive a deployment's instances. A run that waits for approval is left with
every ackloop process stopped (``dev down``), approved from the CLI meanwhile, and answers once
a new stack is up on the same emulators. The stacks run the default layout: the steps service
serves every step kind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ackloop_dev.devstack import ports
from ackloop_dev.devstack.emulators import free_port
from ackloop_dev.devstack.processes import alive

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def _ackloop(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
             ) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ackloop", path=str(Path(sys.executable).parent))
    assert exe
    return subprocess.run([exe, *args], cwd=cwd, env={**os.environ, "COLUMNS": "200",
                                                       **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def test_a_waiting_run_outlives_every_ackloop_process_on_reused_emulators(
        tmp_path: Path) -> None:
    emus, stack = tmp_path / "emulators", tmp_path / "stack"
    pubsub, firestore = free_port(), free_port()
    env = {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{pubsub}",
           "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{firestore}",
           "ACKLOOP_PROJECT_ID": "ackloop-local"}
    up = _ackloop("dev", "up", "--emulators-only", "--directory", str(emus), "--pubsub-port",
                  str(pubsub), "--firestore-port", str(firestore), cwd=tmp_path)
    assert up.returncode == 0, up.stdout + up.stderr
    emulator_pids = json.loads((emus / "state.json").read_text())["pids"]
    try:
        missing = _ackloop("dev", "up", "--reuse-emulators", "--directory", str(stack),
                           cwd=tmp_path, env={"PUBSUB_EMULATOR_HOST": ""})
        assert missing.returncode == 2 and "set PUBSUB_EMULATOR_HOST" in missing.stderr

        first = _ackloop("dev", "up", "--reuse-emulators", "--directory", str(stack),
                         "--base-port", "0", cwd=tmp_path, env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        started = json.loads((stack / "state.json").read_text())["pids"]
        assert "emulator" not in " ".join(started)
        # The default layout: one service for every step kind, pushed to at /<kind>.
        assert {"steps", "api"} <= set(started) and not {"ingest", "model_step"} & set(started)
        asked = _ackloop("ask", "--agent", "approval-demo", "pay 40 to Ada", "--request-id",
                         "reuse-1", "--directory", str(stack), cwd=tmp_path, env=env)
        assert asked.returncode == 2, asked.stderr
        stack_pids = json.loads((stack / "state.json").read_text())["pids"]
        down = _ackloop("dev", "down", "--directory", str(stack), cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        assert not any(alive(pid) for pid in stack_pids.values())
        assert all(alive(pid) for pid in emulator_pids.values())
        assert ports.in_use(pubsub) and ports.in_use(firestore)

        # With no ackloop process running, the CLI decides on the emulators themselves.
        run_id = next(line.split()[1] for line in asked.stderr.splitlines()
                      if line.startswith("run ") and " waits for approval " in line)
        approved = _ackloop("runs", "approve", run_id, cwd=tmp_path, env=env)
        assert approved.returncode == 0, approved.stderr

        again = _ackloop("dev", "up", "--reuse-emulators", "--directory", str(stack),
                         "--base-port", "0", cwd=tmp_path, env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        followed = _ackloop("runs", "follow", run_id, "--timeout", "150", "--directory",
                            str(stack), cwd=tmp_path, env=env)
        assert followed.returncode == 0, followed.stdout + followed.stderr
        assert '"status": "sent"' in followed.stdout
    finally:
        _ackloop("dev", "down", "--directory", str(stack), cwd=tmp_path)
        _ackloop("dev", "down", "--directory", str(emus), cwd=tmp_path)
    assert not any(alive(pid) for pid in emulator_pids.values())
