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
from dataclasses import replace
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

# Floors, the highest first: a module imports nothing of another package on its own floor or on a
# floor above it. Every package of ackloop stands on one, and so does each module at the root
# (``ackloop`` is the package's face); a subpackage (``ackloop.engine.waits``) stands where its
# package does.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ackloop.cli",),
    ("ackloop.evals", "ackloop.http_push", "ackloop"),
    ("ackloop.api",),
    ("ackloop.hosting", "ackloop.testing"),
    ("ackloop.engine",),
    ("ackloop.agents", "ackloop.transcript"),
    ("ackloop.model", "ackloop.store", "ackloop.tools"),
    ("ackloop.bus", "ackloop.docdb", "ackloop.files"),
    ("ackloop.telemetry",),
    ("ackloop.config", "ackloop.domain", "ackloop.gcp"),
)

# Packages that never import the other of the pair, though it stands below them.
NEVER: dict[tuple[str, str], str] = {
    ("ackloop.engine", "ackloop.docdb"): "the engine decides, the store writes",
}

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


def _package_of(name: str) -> str:
    """``ackloop.engine`` for ``ackloop.engine.waits.core``; a module at the root is its own."""
    return ".".join(name.split(".")[:2])


def _floor(name: str) -> int | None:
    """The index in :data:`LAYERS` of the floor ``name``'s package stands on (0 is the top)."""
    package = _package_of(name)
    return next((i for i, floor in enumerate(LAYERS) if package in floor), None)


def upward_imports(modules: dict[str, structure.Module]) -> list[str]:
    """Each import of a module of the project that reaches another package on its own floor or
    on a floor above, as ``importer -> imported``."""
    return sorted(f"{m.name} -> {target}" for m in modules.values() for target in m.imports
                  if _package_of(target) != _package_of(m.name)
                  and (theirs := _floor(target)) is not None
                  and (mine := _floor(m.name)) is not None and theirs <= mine)


def test_every_package_stands_on_a_floor(modules: dict[str, structure.Module]) -> None:
    assert sorted(name for name in modules if _floor(name) is None) == [], (
        "modules of a package on no floor: put the package on one of LAYERS")
    packages = {_package_of(name) for name in modules}
    assert sorted({p for floor in LAYERS for p in floor} - packages) == [], (
        "floors name packages that are gone: take them off LAYERS")
    assert "ackloop.engine.waits.core" in modules  # a subfolder's modules are read too


def test_layers_import_one_way(modules: dict[str, structure.Module]) -> None:
    assert upward_imports(modules) == []


def test_no_package_imports_what_it_must_never(modules: dict[str, structure.Module]) -> None:
    assert sorted(f"{m.name} -> {target}" for m in modules.values() for target in m.imports
                  if (_package_of(m.name), _package_of(target)) in NEVER) == []


def _deepest(modules: dict[str, structure.Module], package: str) -> structure.Module:
    """A module of ``package``, from its deepest subfolder where it has one."""
    mine = [m for name, m in modules.items() if _package_of(name) == package]
    return max(mine, key=lambda m: (m.name.count("."), m.name))


@pytest.mark.parametrize("package", [p for floor in LAYERS[1:] for p in floor])
def test_an_import_up_or_across_is_caught_in_every_package(
        modules: dict[str, structure.Module], package: str) -> None:
    """For each package, a module of it (a subfolder's, where it has one) given an import of
    the top floor and one of a package beside it on its floor: both are reported."""
    module = _deepest(modules, package)
    floor = LAYERS[_floor(package) or 0]
    added = {f"{LAYERS[0][0]}.main"} | {f"{p}.x" if p != "ackloop" else p
                                        for p in floor if p != package}
    widened = {**modules, module.name: replace(module, imports=module.imports | added)}
    assert set(upward_imports(widened)) == {f"{module.name} -> {target}" for target in added}


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
