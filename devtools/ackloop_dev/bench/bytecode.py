"""The project's own modules compiled to bytecode before a cold start is measured, as deployed.

The image installs ackloop as a wheel, and pip compiles every module it installs, so a deployed
process reads ackloop's bytecode. A checkout installed in editable mode never gets any while
``PYTHONDONTWRITEBYTECODE`` is set (as it is in CI and these worktrees): every process it starts
compiles ackloop's 90-odd modules from source, about 50 ms of CPU per cold start that no deployed
process spends. The cold start benches compile them first, into the ``__pycache__`` directories
Python reads (ignored by git; stale files are recompiled from their source's timestamp), unless
``--no-compile`` asks for the checkout as it is.
"""

from __future__ import annotations

import argparse
import compileall
from pathlib import Path

# ackloop itself (a wheel in the image) and the development tools, whose benchmark agents the
# bench stacks serve (a user's catalog is an installed, compiled package too). Not functions/:
# the image copies those files as they are.
PACKAGES = ("shared/ackloop", "devtools/ackloop_dev")


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-compile", action="store_true",
                        help="do not compile the project's modules first: each process started "
                             "then compiles them from source (the image has their bytecode)")


def compile_sources(root: Path) -> None:
    """Write the bytecode of the project's own packages under ``root`` where it is missing or
    stale."""
    for package in PACKAGES:
        directory = root / package
        if directory.is_dir() and not compileall.compile_dir(str(directory), quiet=1):
            raise RuntimeError(f"could not compile {directory}")
