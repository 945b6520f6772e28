"""pytest in a checkout without the tests' extras (``make install`` alone) stops before it
collects anything, in one line that names the missing extras and ``make install-test``,
instead of a collection error per test module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pytest_without_the_test_extras_says_make_install_test(tmp_path: Path) -> None:
    # The interpreter cannot import hypothesis (the dev extra) nor temporalio (ackloop-dev's
    # bench extra), as after `make install`.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['hypothesis'] = None\nsys.modules['temporalio'] = None\n")
    # Nor does it have their pytest plugins (hypothesis has one): no plugin loads by itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/api/test_fuzz.py"],
        cwd=ROOT, env=env | {"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True,
        timeout=300)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 4, output
    assert ("the tests need the extras ackloop-dev[bench], dev, which `make install` leaves out: "
            "run `make install-test` (then `make test-quick` or `make test`)") in output
    assert "ERROR collecting" not in output and "Traceback" not in output, output
