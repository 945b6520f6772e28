"""The structure of the ackloop package in figures: its largest module and class, the public
methods of the store's classes, the long and the branchy functions, its import cycles and the
modules at its root. ``python -m ackloop_dev.bench.structure`` prints them, for before and after
figures of a change; tests/packaging/test_structure.py holds the package to the same measures.

Everything is read from the source with ``ast``: nothing is imported, so the figures of a
checkout are those of its files.

- A function's complexity is McCabe's, counted as ruff's ``C901`` counts it (1, plus one for each
  ``if``/``elif``, loop, ``except``, ``try``'s ``else``, ``match`` case and nested function).
- An import is any ``import``/``from ... import`` statement of the module, at its top or inside a
  function, except those under ``if TYPE_CHECKING:`` (never run). ``from a import b`` where
  ``a.b`` is a module imports ``a.b``; otherwise it imports ``a``. Importing ``a.b`` runs
  ``a/__init__`` first, but that is not counted as an edge of the importer: only the module named.
- A cycle is a strongly connected component of more than one module of that graph.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path


def _package() -> Path:
    """The directory of the ackloop this interpreter imports (found, not imported)."""
    spec = importlib.util.find_spec("ackloop")
    assert spec is not None and spec.origin is not None, "ackloop is not installed"
    return Path(spec.origin).parent


PACKAGE = _package()

LONG_FUNCTION = 50  # lines
COMPLEX_FUNCTION = 15  # McCabe complexity, pyproject's [tool.ruff.lint.mccabe] max-complexity
LONG_MODULE = 600  # lines
WIDE_CLASS = 25  # public methods


@dataclass(frozen=True)
class Function:
    module: str
    qualname: str
    line: int
    lines: int
    complexity: int

    @property
    def name(self) -> str:
        return f"{self.module}:{self.qualname}"


@dataclass(frozen=True)
class Class:
    module: str
    name: str
    lines: int
    public_methods: tuple[str, ...]
    """Its own and those it inherits from the package's classes: the width of its interface."""
    bases: tuple[str, ...] = ()


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)
    functions: list[Function] = field(default_factory=list)
    classes: list[Class] = field(default_factory=list)


# McCabe complexity, as ruff's mccabe rule counts it.

def _complexity(stmts: list[ast.stmt]) -> int:
    count = 0
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            # An ``elif`` is the ``if`` of the ``else`` before it: counted there.
            count += 1 + _complexity(stmt.body) + _complexity(stmt.orelse)
        elif isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
            count += 1 + _complexity(stmt.body) + _complexity(stmt.orelse)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            count += _complexity(stmt.body)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            count += _complexity(stmt.body) + _complexity(stmt.orelse)
            count += _complexity(stmt.finalbody) + (1 if stmt.orelse else 0)
            for handler in stmt.handlers:
                count += 1 + _complexity(handler.body)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                count += 1 + _complexity(case.body)
            if stmt.cases and _irrefutable(stmt.cases[-1]):
                count -= 1
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            count += 1 + _complexity(stmt.body)
        elif isinstance(stmt, ast.ClassDef):
            count += _complexity(stmt.body)
    return count


def _irrefutable(case: ast.match_case) -> bool:
    pattern = case.pattern
    while isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        pattern = pattern.pattern
    return case.guard is None and (
        (isinstance(pattern, ast.MatchAs) and pattern.pattern is None)
        or (isinstance(pattern, ast.MatchOr) and any(
            isinstance(p, ast.MatchAs) and p.pattern is None for p in pattern.patterns)))


def function_complexity(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return 1 + _complexity(node.body)


# Reading a module.

def _type_checking(node: ast.If) -> bool:
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            for other in child.orelse:  # the ``else`` of a TYPE_CHECKING block runs
                yield from _import_nodes_of(other)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _import_nodes(node)


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(module: str, node: ast.Import | ast.ImportFrom, is_package: bool,
             known: set[str]) -> set[str]:
    """The package's modules an import statement runs (outside modules are dropped)."""
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    else:
        source = _absolute(module, node, is_package)
        names = {f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                 for alias in node.names}
    found = set()
    for name in names:
        while name and name not in known:  # ``import a.b.attr`` style: the nearest module
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def _module_name(path: Path, root: Path) -> str:
    relative = path.relative_to(root.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _walk_defs(module: str, body: list[ast.stmt], prefix: str,
               into: Module) -> None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            qualname = f"{prefix}{node.name}"
            start = node.lineno
            into.functions.append(Function(module, qualname, start,
                                           (node.end_lineno or start) - start + 1,
                                           function_complexity(node)))
            _walk_defs(module, node.body, f"{qualname}.", into)
        elif isinstance(node, ast.ClassDef):
            qualname = f"{prefix}{node.name}"
            public = tuple(item.name for item in node.body
                           if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                           and not item.name.startswith("_"))
            bases = tuple(b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                          if isinstance(b, ast.Name | ast.Attribute))
            into.classes.append(Class(module, qualname,
                                      (node.end_lineno or node.lineno) - node.lineno + 1,
                                      public, bases))
            _walk_defs(module, node.body, f"{qualname}.", into)
        else:
            # defs under ``if``/``try`` at module or class level
            for field_name in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field_name, None)
                if isinstance(inner, list):
                    stmts = [s for item in inner
                             for s in (item.body if isinstance(item, ast.ExceptHandler)
                                       else [item])]
                    _walk_defs(module, [s for s in stmts if isinstance(s, ast.stmt)], prefix,
                               into)


def read_package(root: Path = PACKAGE) -> dict[str, Module]:
    """Every module of the package under ``root``, by dotted name."""
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    names = {_module_name(p, root): p for p in paths}
    known = set(names)
    return {name: read_module(path, name, known) for name, path in names.items()}


def read_module(path: Path, name: str, known: set[str] | None = None) -> Module:
    """One module's figures; its imports are those of the ``known`` modules."""
    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    module = Module(name, path, len(text.splitlines()))
    is_package = path.name == "__init__.py"
    for node in _import_nodes(tree):
        module.imports |= _targets(name, node, is_package, known or set()) - {name}
    _walk_defs(name, tree.body, "", module)
    return module


def cycles(modules: dict[str, Module]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep graph does not reach the recursion limit.
        work = [(start, iter(sorted(modules[start].imports)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(modules[target].imports))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))

    for name in sorted(modules):
        if name not in index:
            visit(name)
    return sorted(found, key=lambda c: (-len(c), sorted(c)))


def functions(modules: dict[str, Module]) -> list[Function]:
    return [f for m in modules.values() for f in m.functions]


def classes(modules: dict[str, Module]) -> list[Class]:
    """Every class, its public methods counted with those it inherits from the package's own
    classes (by name: a mixin's methods are the class's interface too)."""
    own = [c for m in modules.values() for c in m.classes]
    by_name = {c.name: c for c in own}

    def inherited(c: Class, seen: frozenset[str]) -> tuple[str, ...]:
        names = list(c.public_methods)
        for base in c.bases:
            if base in by_name and base not in seen:
                names += [n for n in inherited(by_name[base], seen | {base}) if n not in names]
        return tuple(names)

    return [replace(c, public_methods=inherited(c, frozenset({c.name}))) for c in own]


# The report.

def _names(items: list[Function], figure: str) -> str:
    return "\n".join(f"    {f.name} ({getattr(f, figure)})" for f in items)


def report(root: Path = PACKAGE) -> str:
    modules = read_package(root)
    package = _module_name(root / "__init__.py", root)
    lines: list[str] = []
    out = lines.append

    largest = max(modules.values(), key=lambda m: m.lines)
    long_modules = sorted((m for m in modules.values() if m.lines > LONG_MODULE),
                          key=lambda m: -m.lines)
    out(f"modules: {len(modules)}, {sum(m.lines for m in modules.values())} lines")
    out(f"largest module: {largest.name} ({largest.lines} lines)")
    out(f"modules over {LONG_MODULE} lines: {len(long_modules)}")
    lines.extend(f"    {m.name} ({m.lines})" for m in long_modules)

    every_class = classes(modules)
    biggest = max(every_class, key=lambda c: c.lines)
    widest = max(every_class, key=lambda c: len(c.public_methods))
    wide = sorted((c for c in every_class if len(c.public_methods) > WIDE_CLASS),
                  key=lambda c: -len(c.public_methods))
    out(f"largest class: {biggest.module}:{biggest.name} ({biggest.lines} lines, "
        f"{len(biggest.public_methods)} public methods)")
    out(f"most public methods: {widest.module}:{widest.name} ({len(widest.public_methods)})")
    out(f"classes over {WIDE_CLASS} public methods: {len(wide)}")
    lines.extend(f"    {c.module}:{c.name} ({len(c.public_methods)})" for c in wide)

    store = f"{package}.store"
    out(f"public methods of the classes of {store}:")
    for c in sorted(every_class, key=lambda c: (c.module, c.name)):
        if (c.module == store or c.module.startswith(f"{store}.")) and c.public_methods:
            out(f"    {c.module}:{c.name} ({len(c.public_methods)}): "
                + ", ".join(c.public_methods))

    every_function = functions(modules)
    long_functions = sorted((f for f in every_function if f.lines > LONG_FUNCTION),
                            key=lambda f: (-f.lines, f.name))
    complex_functions = sorted((f for f in every_function if f.complexity > COMPLEX_FUNCTION),
                               key=lambda f: (-f.complexity, f.name))
    out(f"functions: {len(every_function)}")
    out(f"functions over {LONG_FUNCTION} lines: {len(long_functions)}")
    if long_functions:
        out(_names(long_functions, "lines"))
    out(f"functions over complexity {COMPLEX_FUNCTION}: {len(complex_functions)}")
    if complex_functions:
        out(_names(complex_functions, "complexity"))

    found = cycles(modules)
    out(f"import cycles: {len(found)}")
    for component in found:
        out(f"    ({len(component)}) " + ", ".join(sorted(component)))
        edges = sorted(f"{name} -> {target}" for name in component
                       for target in modules[name].imports if target in component)
        out("        " + "; ".join(edges))

    root_modules = sorted(m.name.rpartition(".")[2] for m in modules.values()
                          if m.path.parent == root and m.path.name != "__init__.py")
    out(f"modules at the root of {package}: {len(root_modules)}")
    out("    " + ", ".join(root_modules))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=PACKAGE,
                        help="the package's directory (default: this checkout's ackloop)")
    args = parser.parse_args()
    print(report(args.root))


if __name__ == "__main__":
    main()
