"""The runtime package ships no demo or benchmark agent: they are the development catalog
(``ackloop_dev.agents``), which the local stack and the benchmark name in ``ACKLOOP_AGENTS``.
A deployment built from ``shared/`` serves only what the user's catalog (or ``default``) has."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest

from ackloop.agents.builtin import builtin_agents
from ackloop.config.settings import Settings
from ackloop_dev.agents import CATALOG, catalog, with_catalog

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "shared" / "ackloop"
DEMO_AGENTS = ("approval-demo", "research-team", "researcher", "critic", "writer", "reference",
               "reference-long")


def _runtime_modules() -> list[Path]:
    return sorted(RUNTIME.rglob("*.py"))


def test_no_runtime_module_is_a_demo_or_imports_the_development_package() -> None:
    found = []
    for path in _runtime_modules():
        assert "demo" not in path.name and "research_team" not in path.name, path
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(path.relative_to(ROOT), n) for n in names if n.startswith("ackloop_dev")]
    assert found == []


def test_the_builtin_catalog_is_default_alone_and_the_demos_are_the_development_catalogs() -> None:
    http = httpx.AsyncClient()
    assert [a.name for a in builtin_agents(Settings(), http)] == ["default"]
    served = [a.name for a in catalog(Settings(), http)]
    assert served[0] == "default" and set(DEMO_AGENTS) <= set(served)


def test_a_fake_model_server_plays_the_development_catalog_unless_one_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACKLOOP_AGENTS", raising=False)  # whatever an earlier test left there
    assert with_catalog(Settings()).agents == CATALOG
    assert with_catalog(Settings(agents="myapp.agents:catalog")).agents == "myapp.agents:catalog"
