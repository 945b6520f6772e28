"""The security tier's figures: runs the tier (``pytest tests/security``) and prints what it
tried and what it saw.

    python -m tests.security.report [extra pytest arguments]

Prints: requests and envelopes tried, 5xx answers, hangs, leaked secrets, forged steps executed,
documents written by rejected input, poison redelivered, peak API RSS with 400 idle streams, and
the longest time any request held a process. Exits with pytest's status. Needs the emulators,
as the tier does (``PUBSUB_EMULATOR_HOST``/``FIRESTORE_EMULATOR_HOST``, or the jars).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.security.figures import FIGURES_ENV, Figures, lines

TIER = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "figures.json"
        env = {**os.environ, FIGURES_ENV: str(out)}
        status = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  str(TIER), *argv], env=env, cwd=TIER.parents[1])
        if not out.exists():
            print("the tier wrote no figures (did it run?)", file=sys.stderr)
            return status or 1
        figures = Figures(**json.loads(out.read_text()))
    print("\nackloop security tier")
    for line in lines(figures):
        print("  " + line)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
