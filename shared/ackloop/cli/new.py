"""``ackloop new NAME``: a project of one's own, ready to test, evaluate, run and deploy.

It writes ``DIR/NAME`` (``--directory``, default the current one) from the templates shipped
in this package (``templates/new``): a package ``NAME`` with a tool and two agents that answer
offline, its tests, an eval dataset, a Makefile, a Dockerfile and the deployment's Terraform
variables, and a ``requirements.txt`` that installs ackloop from where ``--from`` says (a
checkout, or the wheels of ``make dist``; by default where the running ackloop came from,
:mod:`ackloop.cli.new_source`). A template's ``{{key}}`` is replaced by its value
(:func:`values`); a file named
``X.tmpl`` becomes ``X``, ``package/`` the package's directory and ``gitignore``
``.gitignore``. A name that cannot be a package, or a directory that holds anything, is refused
in one line before anything is written.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import typer

import ackloop
from ackloop.cli.errors import CliError
from ackloop.cli.new_source import Source, running_source, source_at

TEMPLATES = ("templates", "new")
"""Where the templates are, under :mod:`ackloop.cli`."""
SUFFIX = ".tmpl"
RENAMED = {"gitignore": ".gitignore"}
PACKAGE_DIRECTORY = "package"
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
OWN_DIRECTORIES = ("tests", "evals", "infra")
"""Directories of the project: a package of one of these names would be one of them."""


def new(
    name: str = typer.Argument(..., help="The project's name, also its Python package's "
                               "(lower-case letters, digits and underscores)."),
    directory: Path = typer.Option(Path("."), "--directory",
                                   help="Where to create the project's directory NAME."),
    source: Path | None = typer.Option(
        None, "--from", help="Where the project installs ackloop from: a checkout of it, or "
        "the directory of its wheels (`make dist` in the checkout builds them into dist/). "
        "Default: where this ackloop was installed from, when that is one of these."),
) -> None:
    """Create a project: a package with a tool and two agents, tests, an eval, a Makefile, a
    Dockerfile and the deployment's variables."""
    check_name(name)
    origin = source_at(source) if source is not None else running_source()
    target = directory / name
    if target.exists() and not target.is_dir():
        raise CliError(f"{target} already exists and is a file: choose another NAME, or "
                       "another place with --directory")
    if target.exists() and any(target.iterdir()):
        raise CliError(f"{target} already exists and is not empty: choose another NAME, or "
                       "another place with --directory")
    written = write_project(target, values(name, origin))
    shown = _shown(target)
    typer.echo(f"created {shown}/ ({len(written)} files):")
    for path in written:
        typer.echo(f"  {shown}/{path.as_posix()}")
    typer.echo("ackloop from: " + (origin.describe() if origin else "the package index"))
    typer.echo(f"next:\n  cd {shown}\n"
               "  make test     # .venv with the project installed, then its tests, offline\n"
               "  make eval     # the eval dataset, in process\n"
               "  make dev      # the local stack on the emulators; then make ask, make down")


def check_name(name: str) -> None:
    """Refuse a name that cannot be the project's package, saying what to change."""
    if not _NAME.fullmatch(name):
        raise CliError(f"{name!r} is not a valid Python package name: use lower-case letters, "
                       f"digits and underscores, starting with a letter (e.g. {suggest(name)})")
    if keyword.iskeyword(name):
        raise CliError(f"{name!r} is a Python keyword: choose another name "
                       f"(e.g. {name}_agents)")
    if name in OWN_DIRECTORIES:
        raise CliError(f"{name!r} is the name of one of the project's directories "
                       f"({', '.join(OWN_DIRECTORIES)}): choose another (e.g. {name}_agents)")
    found = _module(name)
    if found is not None:
        raise CliError(f"{name!r} is already the name of a module, {found}: a package of that "
                       f"name would shadow it or be shadowed; choose another (e.g. "
                       f"{name}_agents)")


def suggest(name: str) -> str:
    """A package name close to ``name``: lower-case, other characters as ``_``."""
    cleaned = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    if not cleaned:
        return "my_agents"
    return cleaned if cleaned[0].isalpha() else f"agents_{cleaned}"


def _module(name: str) -> str | None:
    """Where a module ``name`` is importable from here (the standard library's included), or
    None."""
    if name in sys.stdlib_module_names:
        return "in the standard library"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:  # a namespace package: any directory of that name
        return None
    return f"at {spec.origin}"


def values(name: str, source: Source | None = None) -> dict[str, str]:
    """What the templates' placeholders stand for: the package's and the distribution's names,
    the ackloop version, and the lines of ``requirements.txt`` that say where ackloop comes
    from (none when from the package index)."""
    if source is None:
        where = ["# ackloop and ackloop-dev from the package index."]
    else:
        where = [f"# ackloop and ackloop-dev from {source.describe()} (`ackloop new --from "
                 "PATH` names another).", *source.requirements()]
    return {
        "name": name,
        "distribution": name.replace("_", "-"),
        "ackloop_version": ackloop.__version__,
        "ackloop_requirements": "\n".join(where),
    }


def templates() -> dict[Path, str]:
    """Every template, by its path under ``templates/new``."""
    root = resources.files("ackloop.cli").joinpath(*TEMPLATES)
    found: dict[Path, str] = {}
    _collect(root, Path(), found)
    return found


def _collect(folder: Traversable, at: Path, found: dict[Path, str]) -> None:
    for entry in folder.iterdir():
        if entry.is_dir():
            _collect(entry, at / entry.name, found)
        elif entry.name.endswith(SUFFIX):
            found[at / entry.name] = entry.read_text(encoding="utf-8")


def render(values: dict[str, str]) -> dict[Path, str]:
    """The project's files, by their path in it: each template with its placeholders
    replaced."""

    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template placeholder {{{{{key}}}}} has no value")
        return values[key]

    files: dict[Path, str] = {}
    for path, text in templates().items():
        parts = [values["name"] if part == PACKAGE_DIRECTORY else part for part in path.parts]
        leaf = parts[-1].removesuffix(SUFFIX)
        parts[-1] = RENAMED.get(leaf, leaf)
        files[Path(*parts)] = _PLACEHOLDER.sub(value, text)
    return files


def write_project(target: Path, values: dict[str, str]) -> list[Path]:
    """Write the project into ``target`` (created if missing); the paths written, sorted."""
    files = render(values)
    for path, text in sorted(files.items()):
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text, encoding="utf-8")
    return sorted(files)


def _shown(path: Path) -> str:
    """``path`` as the user would type it: relative to the current directory when under it."""
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix() or "."
    except ValueError:
        return str(resolved)
