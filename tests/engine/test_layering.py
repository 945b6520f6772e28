"""The engine decides; the store writes: no engine module imports the document layer, and no
module outside the store reaches the store's database handle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ackloop

PACKAGE = Path(ackloop.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module ``path`` names in an import, wherever it stands: ``from a import b`` names
    ``a`` and ``a.b`` (``b`` may be a module)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _document_layer_imports(engine: Path) -> dict[str, list[str]]:
    """The engine's modules, its subfolders' too, that import the document layer."""
    offenders = {p.relative_to(engine).as_posix():
                 sorted(m for m in _imports(p) if m == "ackloop.docdb"
                        or m.startswith("ackloop.docdb."))
                 for p in sorted(engine.rglob("*.py"))}
    return {name: mods for name, mods in offenders.items() if mods}


def test_the_engine_imports_no_document_layer_module() -> None:
    engine = PACKAGE / "engine"
    assert (engine / "waits" / "core.py").exists()
    assert _document_layer_imports(engine) == {}


@pytest.mark.parametrize("line", [
    "from ackloop.docdb.base import Write\n",
    "from ackloop import docdb\n",
    "import ackloop.docdb.memory\n",
    "def f():\n    from ackloop.docdb.base import Write\n",
])
def test_a_document_layer_import_in_a_subfolder_is_caught(tmp_path: Path, line: str) -> None:
    (tmp_path / "waits").mkdir()
    (tmp_path / "dispatch.py").write_text("from ackloop.store import AgentStore\n")
    (tmp_path / "waits" / "core.py").write_text(f"import json\n{line}")
    assert list(_document_layer_imports(tmp_path)) == ["waits/core.py"]


def test_nothing_outside_the_store_writes_through_its_database_handle() -> None:
    """The store's commit is the only writer of steps, runs and the transcript; the modules
    that read the handle for their own documents (token deltas) are listed here."""
    allowed = {"deltas.py"}  # the deltas' own documents, beside the store
    users = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                   if "store" not in p.parts and "docdb" not in p.parts
                   and "store.db" in p.read_text() and p.name not in allowed)
    assert users == [], users
