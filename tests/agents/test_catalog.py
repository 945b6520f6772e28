"""Loading the agent catalog from the user's package: every form, and every error in one line."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ackloop.agents.catalog import CatalogError, load_agents
from ackloop.config.settings import Settings
from ackloop.hosting.runtime import build_agents

HTTP = httpx.AsyncClient()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path for the user's modules; they are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("userapp"):
            del sys.modules[name]


def write(root: Path, module: str, body: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(root).parents:
        if str(parent) != ".":
            (root / parent / "__init__.py").touch()
    path.write_text(body)
    importlib.invalidate_caches()


AGENTS = """
from ackloop.agents.agent import Agent
support = Agent("support", "Help with orders.")
billing = Agent("billing", "Help with invoices.")
"""


def names(reference: str) -> list[str]:
    return [a.name for a in load_agents(Settings(agents=reference), HTTP)]


def test_a_list_attribute(project: Path) -> None:
    write(project, "userapp.agents", AGENTS + "catalog = [support, billing]\n")
    assert names("userapp.agents:catalog") == ["support", "billing"]


def test_a_tuple_attribute_under_a_dotted_path(project: Path) -> None:
    write(project, "userapp.agents", AGENTS + "class Holder:\n    catalog = (billing,)\n")
    assert names("userapp.agents:Holder.catalog") == ["billing"]


def test_a_function_is_given_what_its_signature_asks_for(project: Path) -> None:
    write(project, "userapp.agents", AGENTS + """
import httpx
from ackloop.config.settings import Settings
seen = {}

def nothing():
    return [support]

def both(settings: Settings, client: httpx.AsyncClient):
    seen["both"] = (settings, client)
    return [support, billing]

def by_name(http, settings, extra=1):
    seen["by_name"] = (settings, http, extra)
    return [billing]
""")
    settings = Settings(agents="userapp.agents:both")
    assert [a.name for a in load_agents(settings, HTTP)] == ["support", "billing"]
    module = sys.modules["userapp.agents"]
    assert module.seen["both"] == (settings, HTTP)
    assert names("userapp.agents:nothing") == ["support"]
    assert names("userapp.agents:by_name") == ["billing"]
    assert module.seen["by_name"][1:] == (HTTP, 1)


def test_without_the_setting_the_built_in_catalog_is_served() -> None:
    registry = build_agents(Settings(), HTTP)
    assert registry.names() == ["default"]


def test_an_entry_point_names_the_catalog(project: Path) -> None:
    write(project, "userapp.plugin", AGENTS + "def catalog():\n    return [billing, support]\n")
    info = project / "userapp_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userapp-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ackloop.agents]\nuserapp = userapp.plugin:catalog\n")
    importlib.invalidate_caches()
    assert [a.name for a in load_agents(Settings(), HTTP)] == ["billing", "support"]
    # The setting wins over an entry point.
    write(project, "userapp.other", AGENTS + "catalog = [support]\n")
    assert names("userapp.other:catalog") == ["support"]


def message(reference: str) -> str:
    with pytest.raises(CatalogError) as caught:
        load_agents(Settings(agents=reference), HTTP)
    text = str(caught.value)
    assert "\n" not in text
    return text


def test_a_missing_module_names_the_setting_the_module_and_the_exception() -> None:
    assert message("userapp_missing.agents:catalog") == (
        "ACKLOOP_AGENTS=userapp_missing.agents:catalog: cannot import module "
        "'userapp_missing.agents': ModuleNotFoundError: No module named 'userapp_missing'")


def test_a_module_that_fails_to_import_says_how(project: Path) -> None:
    write(project, "userapp.broken", "from ackloop import Agent\nAgent('bad name', 'x')\n")
    assert message("userapp.broken:catalog").startswith(
        "ACKLOOP_AGENTS=userapp.broken:catalog: cannot import module 'userapp.broken': "
        "ValueError: agent name 'bad name' must be")


def test_every_other_mistake_is_one_catalog_error(project: Path) -> None:
    write(project, "userapp.agents", AGENTS + """
catalog = [support, support]
empty = []
strings = ["support"]
def raises():
    raise RuntimeError("no database")
def wants(database):
    return [support]
""")
    assert "expected 'package.module:attribute'" in message("userapp.agents")
    assert "module 'userapp.agents' has no attribute 'nope'" in message("userapp.agents:nope")
    assert "two agents are named 'support'" in message("userapp.agents:catalog")
    assert "holds no agent" in message("userapp.agents:empty")
    assert "got a list holding str" in message("userapp.agents:strings")
    assert "got str" in message("userapp.agents:__name__")
    assert message("userapp.agents:raises") == (
        "ACKLOOP_AGENTS=userapp.agents:raises: calling it failed: RuntimeError: no database")
    assert "parameter 'database' is neither the Settings" in message("userapp.agents:wants")
