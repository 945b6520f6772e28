"""``ackloop new NAME``: the project it writes installs itself and ackloop into a virtualenv of
its own from the checkout or the wheels it was made from, passes its own tests and its own eval
offline, answers on the local stack, and is clean under ruff; a name, a place or a ``--from``
it cannot use is refused in one line before anything is written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ackloop.cli.main import app
from ackloop.cli.new import render, values
from ackloop.cli.new_source import Source, running_source
from tests.cli.conftest import ACKLOOP, Cli, user_env
from tests.infra.terraform import load_terraform
from tests.infra.tools import require_module
from tests.support.emulators import EmulatorSession

NAME = "unit_helper"
CATALOG = f"{NAME}.agents:catalog"
FILES = {".gitignore", "Dockerfile", "Makefile", "README.md", "pyproject.toml",
         "requirements.txt", f"{NAME}/__init__.py", f"{NAME}/agents.py", f"{NAME}/tools.py",
         "tests/test_agent.py", "evals/cases.yaml", "infra/terraform.tfvars.example"}
OFFLINE = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "PYTHONPATH")
ROOT = Path(__file__).resolve().parents[2]


def _run(command: list[str], cwd: Path, timeout: float = 180, **extra: str
         ) -> subprocess.CompletedProcess[str]:
    """``command`` in a user's offline shell (no Gemini credentials, no pytest options of this
    session's) in ``cwd``."""
    home = cwd.parent / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in user_env(home, **extra).items()
           if k not in OFFLINE and not k.startswith("PYTEST_")} | extra
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project made by the command, as a user makes one."""
    where = tmp_path_factory.mktemp("new")
    made = _run([ACKLOOP, "new", NAME, "--directory", str(where)], where)
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stderr == ""
    project = where / NAME
    assert made.stdout.splitlines()[0] == f"created {NAME}/ ({len(FILES)} files):"
    return project


def test_the_project_holds_every_file_with_each_placeholder_filled(project: Path) -> None:
    found = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    assert found == FILES
    for name in FILES:
        assert "{{" not in (project / name).read_text(), name
    makefile = (project / "Makefile").read_text()
    # Nothing of the machine that made it: its own .venv, made with whatever python3 is.
    assert sys.prefix not in makefile and str(ROOT) not in makefile
    assert "PYTHON ?= python3\n" in makefile and "ACKLOOP ?= $(VENV)/bin/ackloop\n" in makefile
    assert f"CATALOG := {CATALOG}\n" in makefile
    assert f"ENV ACKLOOP_AGENTS={CATALOG}\n" in (project / "Dockerfile").read_text()


def test_it_installs_ackloop_from_the_checkout_the_running_one_came_from(project: Path) -> None:
    assert running_source() == Source("checkout", ROOT)
    lines = (project / "requirements.txt").read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        f"-e {ROOT}[eval]", f"-e {ROOT}/devtools", "-e .[dev]"]


def test_from_a_directory_of_wheels_it_finds_them_there(cli: Cli, tmp_path: Path) -> None:
    wheels = tmp_path / "dist"
    wheels.mkdir()
    for wheel in ("ackloop-0.1.0-py3-none-any.whl", "ackloop_dev-0.1.0-py3-none-any.whl"):
        (wheels / wheel).write_bytes(b"")
    made = cli("new", "wheeled", "--directory", str(tmp_path), "--from", str(wheels))
    assert made.returncode == 0, made.stderr
    assert f"ackloop from: the wheels in {wheels}" in made.stdout.splitlines()
    lines = (tmp_path / "wheeled" / "requirements.txt").read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        f"--find-links {wheels}", "-e .[dev]"]


@pytest.mark.parametrize("held", [[], ["ackloop-0.1.0-py3-none-any.whl"]],
                         ids=["empty", "no ackloop_dev wheel"])
def test_a_from_that_is_neither_a_checkout_nor_the_wheels_is_refused(
        held: list[str], cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    for wheel in held:
        (tmp_path / "dist" / wheel).write_bytes(b"")
    assert _one_error(cli, "mine", "--directory", str(tmp_path), "--from",
                      str(tmp_path / "dist")) == (
        f"error: {tmp_path / 'dist'} is neither a checkout of ackloop (with its pyproject.toml "
        "and devtools/) nor a directory of its two wheels (ackloop-*.whl and ackloop_dev-*.whl, "
        "which `make dist` builds into dist/)")
    assert not (tmp_path / "mine").exists()


def test_its_own_tests_pass(project: Path) -> None:
    ran = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], project)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "5 passed" in ran.stdout, ran.stdout


@pytest.mark.slow
@pytest.mark.timeout(1500)  # about a hundred packages installed, on a busy 2-core machine
def test_make_test_installs_everything_into_a_virtualenv_of_its_own(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """What a new machine does: ``make test`` in a fresh project creates its ``.venv`` with
    python3, installs ackloop from this checkout and the rest from the package index (pip's
    cache when warm: some minutes), and passes."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    where = tmp_path_factory.mktemp("fresh")
    made = _run([ACKLOOP, "new", "fresh", "--directory", str(where)], where)
    assert made.returncode == 0, made.stderr
    cache = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    ran = _run([make, "test"], where / "fresh", timeout=900, PIP_CACHE_DIR=cache)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "5 passed" in ran.stdout, ran.stdout[-3000:]
    installed = where / "fresh" / ".venv" / "bin"
    assert (installed / "ackloop").is_file() and (installed / "pytest").is_file()


def test_its_python_is_clean_under_its_own_ruff_settings(project: Path) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed")
    ran = _run([ruff, "check", "--no-cache", "."], project)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_its_eval_passes_in_process(project: Path) -> None:
    ran = _run([ACKLOOP, "eval", "evals/cases.yaml", "--in-process", "--agents", CATALOG,
                "--no-store"], project, PYTHONPATH=str(project))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "4 of 4 run(s) passed (100%)" in ran.stdout, ran.stdout


def test_its_terraform_variables_are_the_modules(tmp_path: Path) -> None:
    hcl2 = require_module("hcl2")
    module = load_terraform(ROOT / "infra", hcl2)
    example = tmp_path / "terraform.tfvars"
    example.write_text(render(values(NAME, None))[Path("infra/terraform.tfvars.example")])
    with example.open(encoding="utf-8") as handle:
        given = hcl2.load(handle, serialization_options=hcl2.SerializationOptions(
            with_comments=False, strip_string_quotes=True))
    assert set(given) <= set(module.variables), set(given) - set(module.variables)
    required = {name for name, v in module.variables.items() if "default" not in v}
    assert required <= set(given)
    assert given["agents"] == CATALOG


def _one_error(cli: Cli, *args: str) -> str:
    ran = cli("new", *args)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stdout == ""
    lines = ran.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), ran.stderr
    return lines[0]


def test_a_directory_that_holds_anything_is_refused(cli: Cli) -> None:
    (cli.home / "taken").mkdir()
    (cli.home / "taken" / "notes.txt").write_text("mine")
    assert _one_error(cli, "taken") == (
        "error: taken already exists and is not empty: choose another NAME, or another place "
        "with --directory")
    assert [p.name for p in (cli.home / "taken").iterdir()] == ["notes.txt"]


def test_an_empty_directory_is_filled(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "here" / "ready").mkdir(parents=True)
    made = cli("new", "ready", "--directory", str(tmp_path / "here"))
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "here" / "ready" / "ready" / "agents.py").is_file()


@pytest.mark.parametrize(("name", "error"), [
    ("my-app", "error: 'my-app' is not a valid Python package name: use lower-case letters, "
     "digits and underscores, starting with a letter (e.g. my_app)"),
    ("2fast", "error: '2fast' is not a valid Python package name: use lower-case letters, "
     "digits and underscores, starting with a letter (e.g. agents_2fast)"),
    ("import", "error: 'import' is a Python keyword: choose another name (e.g. import_agents)"),
    ("evals", "error: 'evals' is the name of one of the project's directories (tests, evals, "
     "infra): choose another (e.g. evals_agents)"),
    ("json", "error: 'json' is already the name of a module, in the standard library: a package "
     "of that name would shadow it or be shadowed; choose another (e.g. json_agents)"),
])
def test_a_name_that_cannot_be_the_package_is_refused(
        name: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # In this process, through the command line's own handling of known conditions.
    with pytest.raises(SystemExit) as exited:
        app(["new", name, "--directory", str(tmp_path)], prog_name="ackloop")
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"{error}\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.emulator
@pytest.mark.slow
def test_it_answers_on_the_local_stack(project: Path, emulator_session: EmulatorSession,
                                       tmp_path: Path) -> None:
    """``ackloop dev up`` from the project's directory with its catalog, on this session's
    emulators (project ackloop-local, apart from the other tests' stacks), then ``ask``."""
    stack = str(tmp_path / "stack")
    emulators = {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{emulator_session.pubsub_port}",
                 "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{emulator_session.firestore_port}"}
    up = _run([ACKLOOP, "dev", "up", "--reuse-emulators", "--directory", stack,
               "--base-port", "0", "--agents", CATALOG], project, **emulators)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "model: the scripted offline model" in up.stdout, up.stdout
        converted = _run([ACKLOOP, "ask", "--directory", stack, "--json",
                          "How many km is 26.2 miles?"], project)
        explained = _run([ACKLOOP, "ask", "--directory", stack, "--json",
                          "What is a pound?"], project)
    finally:
        down = _run([ACKLOOP, "dev", "down", "--directory", stack], project)
    assert down.returncode == 0, down.stdout + down.stderr
    for asked in (converted, explained):
        assert asked.returncode == 0, asked.stdout + asked.stderr
    run = json.loads(converted.stdout)
    assert run["answer"] == "26.2 mi is 42.1648 km."
    assert [s["name"] for s in run["steps"] if s["kind"] == "tool"] == ["convert"]
    run = json.loads(explained.stdout)
    assert run["answer"] == "A pound (lb) is a unit of mass: 1 lb = 0.45359237 kg."
    assert [s["name"] for s in run["steps"] if s["kind"] == "tool"] == ["ask_explainer"]

