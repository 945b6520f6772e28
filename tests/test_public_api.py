"""The public surface: every name in ``ackloop.__all__`` resolves, and importing the package
alone stays cheap (a function's cold start imports ``ackloop.config.settings``, not the tool
layer)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ackloop


def test_every_public_name_resolves() -> None:
    for name in ackloop.__all__:
        assert getattr(ackloop, name) is not None, name


def test_dir_lists_the_public_names() -> None:
    assert set(ackloop.__all__) <= set(dir(ackloop))


def test_public_names_are_the_internal_objects() -> None:
    from ackloop.tools.definition import tool
    from ackloop.tools.errors import ToolError

    assert ackloop.tool is tool
    assert ackloop.ToolError is ToolError


def test_type_checkers_see_the_same_names_as_the_lazy_table() -> None:
    """The TYPE_CHECKING block re-exports each name from the module the table loads it from."""
    tree = ast.parse(Path(ackloop.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            assert alias.asname == alias.name, f"import {alias.name} as {alias.name}"
            seen[alias.name] = f"{node.module}:{alias.name}"
    assert seen == ackloop._PUBLIC


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        ackloop.Nope  # noqa: B018


def test_submodules_still_import_through_the_package() -> None:
    from ackloop.domain import keys

    assert keys.__name__ == "ackloop.domain.keys"


def _modules_after(statement: str) -> set[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out))


_PUBLIC_MODULES = {"ackloop.tools", "ackloop.tools.definition", "google.genai"}


def test_importing_the_package_imports_nothing_else() -> None:
    loaded = _modules_after("import ackloop")
    unwanted = _PUBLIC_MODULES | {"pydantic"}
    assert not unwanted & loaded, sorted(unwanted & loaded)
    assert {name for name in loaded if name.startswith("ackloop.")} == set()


def test_a_cold_start_import_does_not_import_the_public_modules() -> None:
    loaded = _modules_after("import ackloop.config.settings")
    assert not _PUBLIC_MODULES & loaded, sorted(_PUBLIC_MODULES & loaded)


def test_using_a_public_name_imports_only_its_module() -> None:
    loaded = _modules_after("from ackloop import ToolError")
    assert "ackloop.tools.errors" in loaded
    assert "google.genai" not in loaded
