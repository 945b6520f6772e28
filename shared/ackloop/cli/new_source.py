"""Where a new project gets ackloop from: a checkout of its source or a directory of its wheels.

ackloop and ackloop-dev are not on the package index: a project of ``ackloop new`` installs
them from a checkout (``pip install -e`` of its directory and of its ``devtools/``) or from the
wheels ``make dist`` builds (``--find-links``). ``ackloop new --from PATH`` names either; by
default it is where the running ackloop was installed from (pip's ``direct_url.json``), or the
checkout its code lies in. The project's ``requirements.txt`` says it, so ``make install``
resolves every dependency on a machine that has the checkout or the wheels at that path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import ackloop
from ackloop.cli.errors import CliError

RUNTIME_WHEELS = "ackloop-*.whl"
DEVTOOLS_WHEELS = "ackloop_dev-*.whl"
_PROJECT_NAME = re.compile(r'^name\s*=\s*"ackloop"\s*$', re.MULTILINE)


@dataclass(frozen=True)
class Source:
    """A checkout of ackloop (``kind="checkout"``) or a directory of its wheels
    (``kind="wheels"``), by its absolute path."""

    kind: str
    path: Path

    def requirements(self) -> list[str]:
        """The lines of ``requirements.txt`` that install ackloop, its eval extra and its
        development tools from here. From a checkout they are editable: the local stack runs
        the checkout's ``functions/``."""
        if self.kind == "checkout":
            return [f"-e {self.path}[eval]", f"-e {self.path / 'devtools'}"]
        return [f"--find-links {self.path}"]

    def describe(self) -> str:
        """One line for the user: what the project installs ackloop from."""
        what = "the checkout" if self.kind == "checkout" else "the wheels in"
        return f"{what} {self.path}"


def is_checkout(path: Path) -> bool:
    """Whether ``path`` is a checkout of ackloop: its ``pyproject.toml`` names the project
    ``ackloop``, and the development tools are beside it in ``devtools/``."""
    project = path / "pyproject.toml"
    if not project.is_file() or not (path / "devtools" / "pyproject.toml").is_file():
        return False
    return bool(_PROJECT_NAME.search(project.read_text(encoding="utf-8")))


def holds_wheels(path: Path) -> bool:
    """Whether ``path`` holds a wheel of ackloop and one of ackloop-dev."""
    return (path.is_dir() and any(path.glob(RUNTIME_WHEELS))
            and any(path.glob(DEVTOOLS_WHEELS)))


def source_at(path: Path) -> Source:
    """The source ``path`` names, or a one-line error saying what it should be."""
    resolved = path.expanduser().resolve()
    if is_checkout(resolved):
        return Source("checkout", resolved)
    if holds_wheels(resolved):
        return Source("wheels", resolved)
    raise CliError(f"{path} is neither a checkout of ackloop (with its pyproject.toml and "
                   "devtools/) nor a directory of its two wheels (ackloop-*.whl and "
                   "ackloop_dev-*.whl, which `make dist` builds into dist/)")


def running_source() -> Source | None:
    """Where the running ackloop came from, when that is a checkout or a directory of wheels;
    None when it came from a package index (then the project needs nothing more)."""
    installed = _installed_from()
    for candidate in (installed, Path(ackloop.__file__).resolve().parents[2]):
        if candidate is None:
            continue
        if is_checkout(candidate):
            return Source("checkout", candidate)
        if holds_wheels(candidate):
            return Source("wheels", candidate)
    return None


def _installed_from() -> Path | None:
    """The directory pip installed ackloop from (a checkout, or a wheel's directory), from the
    ``direct_url.json`` it records; None when it recorded none."""
    try:
        recorded = metadata.distribution("ackloop").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not recorded:
        return None
    url = urlsplit(json.loads(recorded).get("url", ""))
    if url.scheme != "file":
        return None
    path = Path(unquote(url.path))
    return path.parent if path.suffix == ".whl" else path
