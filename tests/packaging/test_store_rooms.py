"""The store is a pure writer in rooms: what its package may import, and how its rooms stand.

The engine builds the messages, the cost and the masked text
(:mod:`ackloop.engine.commit_contents`), and the store writes them: so the store imports none of
the modules that build them (:mod:`ackloop.engine.outbox_entries`, :mod:`ackloop.engine.deltas`,
:mod:`ackloop.domain.context_window`, :mod:`ackloop.tools`, :mod:`ackloop.engine`), nor anything
else outside the types and the document layer it writes with. ``if TYPE_CHECKING:`` imports
count here too: a type the store names is a dependency.

Its rooms stand side by side on one ground (:class:`~ackloop.store.base.StoreBase`), none on
another, and :class:`~ackloop.store.AgentStore` holds each as an attribute.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import ackloop.store
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.store import AgentStore, StoreBase

STORE = Path(ackloop.store.__file__).parent

ALLOWED = ("ackloop.store", "ackloop.docdb", "ackloop.domain.records", "ackloop.domain.wire",
           "ackloop.domain.cost", "ackloop.domain.jsondict", "ackloop.domain.keys",
           "ackloop.domain.errors", "ackloop.config.settings", "ackloop.domain.eval_reports",
           "ackloop.domain.schedules", "ackloop.domain.document_sizes")
"""What of the project the store may import (a module, or a package and all it holds): an
eval's report is a type (:mod:`ackloop.domain.eval_reports` imports nothing of the project)."""

ROOMS = {"runs": "Runs", "steps": "Steps", "transcript": "Transcripts", "waits": "Waits",
         "letters": "Letters", "evals": "Evals", "schedules": "Schedules", "quotas": "Quotas"}


def project_imports(source: str, module: str) -> set[str]:
    """Every module of ``ackloop`` that ``source`` (the module ``module``) imports, wherever
    the import stands (a function, ``if TYPE_CHECKING:``); ``from a import b`` counts as
    ``a.b`` (``b`` may be a module)."""
    found: set[str] = set()
    package = module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name == "ackloop" or name.startswith("ackloop.")}


def allowed(name: str) -> bool:
    """Whether the store may import ``name`` (``ackloop.domain.records.RunRecord`` is of
    ``ackloop.domain.records``; ``ackloop.domain.cost`` alone is ``ackloop.domain.cost``)."""
    return any(name == top or name.startswith(f"{top}.") for top in ALLOWED)


@pytest.mark.parametrize(("source", "module", "expected"), [
    ("from ackloop.engine import outbox_entries\n", "ackloop.store.steps",
     {"ackloop.engine.outbox_entries"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from ackloop.engine.deltas import DeltaRecord\n", "ackloop.store.decision",
     {"ackloop.engine.deltas.DeltaRecord"}),
    ("def f():\n    import ackloop.domain.context_window\n", "ackloop.store.transcript",
     {"ackloop.domain.context_window"}),
    ("from .base import Claim\n", "ackloop.store.steps", {"ackloop.store.base.Claim"}),
    ("import json\nfrom pydantic import BaseModel\n", "ackloop.store.runs", set()),
])
def test_the_imports_of_a_module(source: str, module: str, expected: set[str]) -> None:
    assert project_imports(source, module) == expected


@pytest.mark.parametrize(("name", "expected"), [
    ("ackloop.domain.records.RunRecord", True), ("ackloop.docdb.base.Write", True),
    ("ackloop.domain.cost", True), ("ackloop.store.base.StoreBase", True),
    ("ackloop.engine.outbox_entries", False), ("ackloop.engine.deltas.DeltaRecord", False),
    ("ackloop.domain.context_window.summary_content", False),
    ("ackloop.telemetry.masking.mask_secrets", False),
    ("ackloop.engine.commit_contents", False), ("ackloop.costs", False), ("ackloop", False),
])
def test_what_the_store_may_import(name: str, expected: bool) -> None:
    assert allowed(name) is expected


def test_the_store_imports_only_types_and_the_document_layer() -> None:
    outside = sorted(f"{path.name}: {name}" for path in STORE.glob("*.py")
                     for name in project_imports(path.read_text(),
                                                 f"ackloop.store.{path.stem}")
                     if not allowed(name))
    assert outside == [], "the store writes what the engine built: move these to the engine"


def test_the_rooms_stand_on_one_ground_and_the_port_holds_them() -> None:
    store = AgentStore(MemoryDocumentDB())
    held = {name: type(room).__name__ for name, room in vars(store).items()
            if isinstance(room, StoreBase)}
    assert held == ROOMS
    for name in ROOMS:
        room = type(getattr(store, name))
        assert room.__bases__ == (StoreBase,), f"{room.__name__} is built on another room"
        assert getattr(store, name).db is store.db
    # The port forwards nothing: a room's method is called on its room.
    assert "__getattr__" not in vars(AgentStore)
    with pytest.raises(AttributeError):
        getattr(store, "get_run")  # noqa: B009
    public = [n for n, _ in inspect.getmembers(AgentStore) if not n.startswith("_")]
    assert not any(callable(getattr(AgentStore, n)) and n in dir(type(store.runs))
                   and n not in dir(StoreBase) for n in public)
