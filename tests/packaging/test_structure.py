"""The structure rules of the code, held: no function over ruff's max-complexity, no import cycle,
layers that import one way, no module over 600 lines, no class over 25 public methods.

What breaks a rule today is allowed by name, in one list per rule: the complex functions in
pyproject's ``[tool.ruff.lint.per-file-ignores]`` (ruff enforces the rule everywhere else), the
rest at the top of this file. Each list only shrinks: a test fails when something outside its
list breaks the rule, and when something on it no longer does (then take it off the list).
``python -m ackloop_dev.bench.structure`` prints the figures.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import ackloop
from ackloop_dev.bench import structure

PACKAGE = Path(ackloop.__file__).parent
ROOT = PACKAGE.parents[1]

# --- The allow-lists (each only shrinks) -------------------------------------------------------

# Import cycles (strongly connected components of the import graph, TYPE_CHECKING imports
# left out), by their modules.
ALLOWED_CYCLES: set[frozenset[str]] = set()

# Modules over LONG_MODULE lines.
ALLOWED_LONG_MODULES: set[str] = set()

# Classes over WIDE_CLASS public methods, as "module:Class" (inherited methods count).
ALLOWED_WIDE_CLASSES: set[str] = set()

# Layers, the highest first: a module of one imports nothing of a layer before it.
LAYERS = ("ackloop.cli", "ackloop.api", "ackloop.engine", "ackloop.model", "ackloop.store",
          "ackloop.docdb")

# -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modules() -> dict[str, structure.Module]:
    return structure.read_package(PACKAGE)


def _complexity_list() -> dict[str, set[str]]:
    """pyproject's C901 per-file ignores: file -> the functions named in its line's comment."""
    text = (ROOT / "pyproject.toml").read_text()
    ignores = tomllib.loads(text)["tool"]["ruff"]["lint"].get("per-file-ignores", {})
    listed: dict[str, set[str]] = {}
    for path, codes in ignores.items():
        if "C901" not in codes and "C90" not in codes:
            continue
        line = re.search(rf'^"{re.escape(path)}"\s*=.*?#(.*)$', text, flags=re.MULTILINE)
        assert line, f"name the functions of {path} in a comment on its per-file-ignores line"
        listed[path] = {name.strip() for name in line.group(1).split(",") if name.strip()}
        assert listed[path], f"name the functions of {path} in its comment"
    return listed


def _sources() -> list[Path]:
    """The project's Python files, as ruff sees them (not virtualenvs, caches or build output)."""
    skipped = {"__pycache__", "node_modules", "build", "dist"}
    return sorted(p for p in ROOT.rglob("*.py")
                  if not any(part.startswith(".") or part in skipped or part.endswith(".egg-info")
                             for part in p.relative_to(ROOT).parts[:-1]))


def test_complex_functions_are_exactly_the_listed_ones() -> None:
    listed = _complexity_list()
    over: dict[str, set[str]] = {}
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        for function in structure.read_module(path, relative).functions:
            if function.complexity > structure.COMPLEX_FUNCTION:
                over.setdefault(relative, set()).add(function.qualname.rpartition(".")[2])
    outside = {path: names - listed.get(path, set()) for path, names in over.items()}
    assert {p: n for p, n in outside.items() if n} == {}, (
        f"functions over complexity {structure.COMPLEX_FUNCTION}: split them")
    fixed = {path: names - over.get(path, set()) for path, names in listed.items()}
    assert {p: n for p, n in fixed.items() if n} == {}, (
        "no longer over the complexity: take them off pyproject's per-file-ignores")


def test_complexity_is_counted_as_ruff_counts_it() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    done = subprocess.run(
        [ruff, "check", str(PACKAGE), "--isolated", "--select", "C901", "--config",
         "lint.mccabe.max-complexity=0", "--output-format", "json"],
        capture_output=True, text=True, timeout=120)
    theirs = {(Path(d["filename"]).resolve(), d["location"]["row"]):
              int(re.findall(r"\((\d+) > 0\)", d["message"])[0])
              for d in json.loads(done.stdout)}
    ours = {(m.path.resolve(), f.line): f.complexity
            for m in structure.read_package(PACKAGE).values() for f in m.functions}
    assert ours == theirs


@pytest.mark.parametrize(("source", "expected"), [
    ("def f():\n    return 1\n", 1),
    ("def f(x):\n    if x:\n        pass\n    elif x > 1:\n        pass\n    else:\n"
     "        pass\n", 3),
    ("def f(x):\n    for y in x:\n        while y:\n            pass\n    else:\n"
     "        pass\n", 3),
    ("def f():\n    try:\n        pass\n    except ValueError:\n        pass\n"
     "    except KeyError:\n        pass\n    else:\n        pass\n    finally:\n"
     "        pass\n", 4),
    ("def f(x):\n    match x:\n        case 1:\n            pass\n        case _:\n"
     "            pass\n", 2),
    ("def f():\n    def g(x):\n        if x:\n            pass\n    return g\n", 3),
    ("def f(x):\n    return [y for y in x if y] if x and not x else None\n", 1),
])
def test_the_complexity_of_a_function(source: str, expected: int) -> None:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    assert structure.function_complexity(node) == expected


def test_import_cycles_are_only_the_listed_ones(modules: dict[str, structure.Module]) -> None:
    found = set(structure.cycles(modules))
    new = [sorted(c) for c in found - ALLOWED_CYCLES]
    gone = [sorted(c) for c in ALLOWED_CYCLES - found]
    assert new == [], "import cycles not on ALLOWED_CYCLES (a listed one that grew is new too)"
    assert gone == [], "cycles broken or changed: update ALLOWED_CYCLES"


def test_imports_inside_functions_and_not_type_checking_ones_count(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text("from pkg.a import f\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from pkg import a\nelse:\n    import pkg.b\n")
    found = structure.read_package(package)
    assert found["pkg.a"].imports == {"pkg.b"}
    assert found["pkg.c"].imports == {"pkg.b"}
    assert structure.cycles(found) == [frozenset({"pkg.a", "pkg.b"})]


def test_layers_import_one_way(modules: dict[str, structure.Module]) -> None:
    def layer(name: str) -> int | None:
        return next((i for i, top in enumerate(LAYERS)
                     if name == top or name.startswith(f"{top}.")), None)

    upward = sorted(f"{m.name} -> {target}" for m in modules.values() for target in m.imports
                    if (mine := layer(m.name)) is not None
                    and (theirs := layer(target)) is not None and theirs < mine)
    assert upward == []


def test_long_modules_are_only_the_listed_ones(modules: dict[str, structure.Module]) -> None:
    found = {m.name for m in modules.values() if m.lines > structure.LONG_MODULE}
    assert sorted(found - ALLOWED_LONG_MODULES) == [], (
        f"modules over {structure.LONG_MODULE} lines: split them")
    assert sorted(ALLOWED_LONG_MODULES - found) == [], (
        "no longer long: take them off ALLOWED_LONG_MODULES")


def test_wide_classes_are_only_the_listed_ones(modules: dict[str, structure.Module]) -> None:
    found = {f"{c.module}:{c.name}" for c in structure.classes(modules)
             if len(c.public_methods) > structure.WIDE_CLASS}
    assert sorted(found - ALLOWED_WIDE_CLASSES) == [], (
        f"classes over {structure.WIDE_CLASS} public methods: split them")
    assert sorted(ALLOWED_WIDE_CLASSES - found) == [], (
        "no longer wide: take them off ALLOWED_WIDE_CLASSES")
