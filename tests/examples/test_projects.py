"""The example user projects pass their own tests, run as their authors would run them: the
support desk, and the expense desk the tutorial (docs/tutorial/) builds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("project", ["support_desk", "expense_desk"])
def test_the_example_project_passes_its_own_tests(project: str) -> None:
    root = EXAMPLES / project
    written = sum(len(re.findall(r"^async def test_|^def test_", path.read_text(), re.M))
                  for path in (root / "tests").glob("test_*.py"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACKLOOP_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert written >= 5
    assert re.fullmatch(rf"{written} passed in [\d.]+s", summary), summary
