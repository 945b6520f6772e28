"""The documentation site, built once per test session with ``mkdocs build --strict``.

Without MkDocs (the ``docs`` extra) the tests that need the site are skipped, saying so; in CI
(``CI=true``, where ``make install-test`` installs it) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Site:
    """A built site: where it is, and what the build said and took."""

    directory: Path
    returncode: int
    output: str
    seconds: float

    def page(self, path: str) -> str:
        """The HTML of the page at ``path`` (``tutorial/``, ``reference/ackloop/``)."""
        return (self.directory / path / "index.html").read_text(encoding="utf-8")


_BUILT: list[Site] = []


def built_site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The site, built the first time a test asks for it in this session."""
    if not _BUILT:
        if importlib.util.find_spec("mkdocs") is None:
            reason = "mkdocs is not installed: pip install -e '.[docs]' (make install-test)"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"the documentation site cannot be built in CI: {reason}",
                            pytrace=False)
            pytest.skip(f"documentation site tests SKIPPED: {reason}")
        directory = tmp_path_factory.mktemp("site")
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(directory)],
            cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
            text=True, timeout=600)
        _BUILT.append(Site(directory, done.returncode, done.stdout + done.stderr,
                           time.monotonic() - started))
    return _BUILT[0]
