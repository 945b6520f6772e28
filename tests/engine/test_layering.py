"""The engine decides; the store writes: no engine module imports the document layer, and no
module outside the store reaches the store's database handle."""

from __future__ import annotations

import ast
from pathlib import Path

import ackloop

PACKAGE = Path(ackloop.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_engine_imports_no_document_layer_module() -> None:
    engine = sorted((PACKAGE / "engine").glob("*.py"))
    assert engine
    offenders = {p.name: sorted(m for m in _imports(p) if m.startswith("ackloop.docdb"))
                 for p in engine}
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_nothing_outside_the_store_writes_through_its_database_handle() -> None:
    """The store's commit is the only writer of steps, runs and the transcript; the modules
    that read the handle for their own documents (token deltas) are listed here."""
    allowed = {"deltas.py"}  # the deltas' own documents, beside the store
    users = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                   if "store" not in p.parts and "docdb" not in p.parts
                   and "store.db" in p.read_text() and p.name not in allowed)
    assert users == [], users
