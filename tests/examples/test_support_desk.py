"""The example user project passes its own tests, run as its author would run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "support_desk"


def test_the_support_desk_project_passes_its_own_tests() -> None:
    written = sum(len(re.findall(r"^async def test_|^def test_", path.read_text(), re.M))
                  for path in (PROJECT / "tests").glob("test_*.py"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACKLOOP_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert written >= 5
    assert re.fullmatch(rf"{written} passed in [\d.]+s", summary), summary
