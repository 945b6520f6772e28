"""The README's offline example runs and answers from its tool's result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_order_agent_example_runs_offline() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "order_agent.py")],
                          capture_output=True, text=True, timeout=60, check=True)
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "completed: Order A-1234 is shipped."
    assert [line.split()[0] for line in lines[:-1]] == ["0000-model", "0000-tool-000", "0001-model"]
