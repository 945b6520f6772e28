"""The agent catalog, loaded before the local stack starts anything.

Every function of the stack loads the catalog ``ACKLOOP_AGENTS`` names when it starts; a
catalog that cannot load stops each of them, after the emulators have started. ``dev up``
loads it first, once, in a child process with what the functions get (their ``PYTHONPATH``,
``ACKLOOP_AGENTS``, the working directory): a refusal is the one line
:class:`ackloop.agents.catalog.CatalogError` says, and nothing is started.
``python -m ackloop_dev.devstack.catalog_check`` is that child: it prints the line and exits 1.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

CHECK_SECONDS = 120.0
"""How long loading the catalog may take (it imports the user's package)."""


def refusal(env: Mapping[str, str], cwd: Path) -> str | None:
    """Why the catalog the functions would load cannot load, in one line (None: it loads)."""
    try:
        done = subprocess.run([sys.executable, "-m", __name__], env=dict(env), cwd=cwd,
                              capture_output=True, text=True, timeout=CHECK_SECONDS,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"the agent catalog did not load within {CHECK_SECONDS:g} s"
    if done.returncode == 0:
        return None
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return said[-1] if said else f"loading the agent catalog exited with {done.returncode}"


async def _load() -> None:
    import httpx

    from ackloop.agents.catalog import load_registry
    from ackloop.config.settings import Settings

    async with httpx.AsyncClient() as http:
        load_registry(Settings(), http)


def main() -> int:
    from ackloop.agents.catalog import CatalogError

    try:
        asyncio.run(_load())
    except CatalogError as exc:
        print(str(exc).replace("\n", " "))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
