"""The runtime package's root holds only the public API (``__init__``, which names every public
name's module lazily) and the entry points the functions name (``http_push``), with the
package's data; every other module lives in the subpackage of its role."""

from __future__ import annotations

import importlib
from pathlib import Path

import ackloop

PACKAGE = Path(ackloop.__file__).parent
ALLOWED_ROOT_FILES = {"__init__.py", "http_push.py", "py.typed", "delivery.json"}
"""The public API, the functions' entry (``functions/*/main.py`` import ``ackloop.http_push``),
the type marker and the delivery policy ``infra/pubsub.tf`` reads."""


def test_the_root_holds_only_the_public_api_and_the_entry_points() -> None:
    found = {p.name for p in PACKAGE.iterdir() if p.is_file() and not p.name.endswith(".pyc")}
    assert found - ALLOWED_ROOT_FILES == set(), "a module at the root: move it by role"
    assert found >= ALLOWED_ROOT_FILES


def test_every_subpackage_is_a_package() -> None:
    bare = [p.name for p in PACKAGE.iterdir()
            if p.is_dir() and p.name not in {"__pycache__"} and any(p.glob("*.py"))
            and not (p / "__init__.py").exists()]
    assert bare == []


def test_each_public_name_resolves_to_a_module_under_a_subpackage() -> None:
    for name, target in ackloop._PUBLIC.items():
        module, attribute = target.split(":")
        assert module.count(".") >= 2, f"{name}: {module} is a root module"
        assert getattr(importlib.import_module(module), attribute) is getattr(ackloop, name)


def test_the_functions_import_their_entry_from_the_root() -> None:
    root = PACKAGE.parents[1]
    for main in sorted((root / "functions").glob("*/main.py")):
        assert "from ackloop.http_push import handle_push" in main.read_text(), main
