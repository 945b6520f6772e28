"""The one image: Dockerfile shape, hadolint, build context, and the hash-locked dependencies."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.infra.tools import REPO, require_executable

DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
BUILD_LOCK = REPO / "requirements-build.lock"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
REGENERATE = (
    "regenerate with: pip-compile --generate-hashes --allow-unsafe --strip-extras "
    "--output-file=requirements.lock pyproject.toml (see the lock file's header)"
)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip-compile --generate-hashes file."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"^([A-Za-z0-9._-]+)==(\S+)\s*(.*)$", line)
        assert match, f"{path.name}: not an exact pin: {line[:80]!r}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", match.group(3))
        pins[canonicalize_name(match.group(1))] = (match.group(2), hashes)
    return pins


def test_hadolint_is_clean() -> None:
    hadolint = require_executable("hadolint", "HADOLINT_BIN")
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_small_multi_stage_image_on_python_311_slim() -> None:
    froms = [args for keyword, args in instructions() if keyword == "FROM"]
    assert len(froms) == 2, "build stage + runtime stage"
    for args in froms:
        assert args.split()[0].startswith("python:3.11-slim"), args
    assert froms[0].split()[0] == froms[1].split()[0], (
        "the venv must run on the interpreter it was built with"
    )
    copies = [args for keyword, args in instructions() if keyword == "COPY"]
    assert any(args.startswith("--from=build /opt/venv") for args in copies)


def test_dependencies_install_only_from_the_hash_locked_files() -> None:
    runs = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    installs = re.findall(r"pip install ([^&]*)", runs)
    assert installs
    for install in installs:
        locked_install = "--require-hashes" in install and "-r requirements" in install
        own_wheel = "--no-deps /wheels/ackloop-" in install
        assert locked_install or own_wheel, f"unlocked install: pip install {install}"
    assert "--no-build-isolation" in runs, "building the wheel must not fetch unpinned build tools"


def test_runs_as_a_non_root_user_and_serves_by_function_target() -> None:
    steps = instructions()
    users = [args for keyword, args in steps if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert ("WORKDIR", "/app") in steps
    assert any(keyword == "COPY" and args.startswith("functions ") for keyword, args in steps)
    assert ("CMD", '["ackloop", "run"]') in steps
    assert "ackloop" in PYPROJECT["project"]["scripts"], "`ackloop` must be a console script"


def test_build_context_keeps_what_the_dockerfile_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore, "the context is an allow-list"
    for keyword, args in instructions():
        if keyword != "COPY" or args.startswith("--from="):
            continue
        for source in args.split()[:-1]:
            assert source in allowed, f"COPY {source} is excluded by .dockerignore"
    assert "tests" not in allowed and ".git" not in allowed


def test_lock_pins_every_runtime_dependency_within_its_range() -> None:
    pins = locked(LOCK)
    for spec in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements.lock: {REGENERATE}"
        version = pins[name][0]
        assert SpecifierSet(str(requirement.specifier)).contains(version, prereleases=True), (
            f"requirements.lock has {name}=={version}, pyproject wants {requirement}: {REGENERATE}"
        )
    unhashed = sorted(name for name, (_, hashes) in pins.items() if not hashes)
    assert not unhashed, f"pins without hashes: {unhashed}"


def test_build_lock_pins_the_build_backend() -> None:
    pins = locked(BUILD_LOCK)
    for spec in PYPROJECT["build-system"]["requires"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} missing from requirements-build.lock"
        assert requirement.specifier.contains(pins[name][0], prereleases=True)
        assert pins[name][1], f"{name} has no hash"


def test_lock_files_name_no_local_paths_or_indexes() -> None:
    for path in (LOCK, BUILD_LOCK):
        text = path.read_text(encoding="utf-8")
        assert "file://" not in text and "--index-url" not in text and "--find-links" not in text
        assert not re.search(r"(?m)^\s*(?:-e\s+)?/", text), f"{path.name} names a local path"
