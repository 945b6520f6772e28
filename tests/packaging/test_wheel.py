"""The runtime wheel (what the image and ``pip install ackloop`` get) carries product code only;
the local stack, the benchmark, the chaos suite and the fakes are in the ``ackloop-dev`` wheel.
Both build without setuptools' license deprecation warning. Real builds with pip, as the
Dockerfile does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = ("ackloop_dev/", "/bench/", "/chaos/", "fake", "sandbox", "devstack", "push_",
            "scheduler", "emulators", "ackloop/cli/dev.py", "demo", "research_team")
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")


def _build(project: Path, files: list[str], into: Path) -> tuple[zipfile.ZipFile, str]:
    """Build from a copy of ``files`` (setuptools writes build/ into the tree it builds)."""
    source = into / "source"
    source.mkdir()
    for name in files:
        if (project / name).is_dir():
            shutil.copytree(project / name, source / name, ignore=LEFT_OUT)
        else:
            shutil.copy(project / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(into),
         str(source)], capture_output=True, text=True, timeout=600, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    (wheel,) = into.glob("*.whl")
    return zipfile.ZipFile(wheel), log


@pytest.mark.slow
def test_the_runtime_wheel_has_no_development_tools(tmp_path: Path) -> None:
    # What the Dockerfile copies to build the image's wheel.
    wheel, log = _build(ROOT, ["pyproject.toml", "README.md", "LICENSE", "shared"], tmp_path)
    names = wheel.namelist()
    # The local stack's state file reader and the retry policy infra/ shares stay, and so do
    # the run inspector's files, which the API serves at /ui, and `ackloop new`'s templates.
    for module in ("ackloop/engine/model_step.py", "ackloop/testing/localstack.py",
                   "ackloop/bus/delivery.py", "ackloop/delivery.json"):
        assert module in names
    assets = {p.relative_to(ROOT / "shared").as_posix()
              for p in (ROOT / "shared" / "ackloop" / "api" / "ui_assets").iterdir()}
    assert {"ackloop/api/ui_assets/index.html", "ackloop/api/ui_assets/chat.js"} <= assets
    assert assets <= set(names), assets - set(names)
    templates = {p.relative_to(ROOT / "shared").as_posix()
                 for p in (ROOT / "shared" / "ackloop" / "cli" / "templates").rglob("*.tmpl")}
    assert templates and templates <= set(names), templates - set(names)
    assert [n for n in names if any(part in n for part in DEV_ONLY)] == []
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    text = wheel.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    assert "Provides-Extra: bench" not in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "project.license` as a TOML table is deprecated" not in log
    assert "License classifiers are deprecated" not in log


@pytest.mark.slow
def test_the_dev_wheel_carries_the_tools_and_their_commands(tmp_path: Path) -> None:
    wheel, log = _build(ROOT / "devtools", ["pyproject.toml", "ackloop_dev"], tmp_path)
    names = wheel.namelist()
    for module in ("ackloop_dev/bench/compare.py", "ackloop_dev/chaos/runner.py",
                   "ackloop_dev/cli/bench.py", "ackloop_dev/fakes/gemini_server.py",
                   "ackloop_dev/fakes/sandbox_apis.py", "ackloop_dev/cli/dev.py",
                   "ackloop_dev/devstack/stack.py", "ackloop_dev/devstack/push_delivery.py"):
        assert module in names
    assert not [n for n in names if n.startswith("ackloop/")]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    commands = wheel.read(entry_points).decode()
    assert "[ackloop.commands]" in commands
    assert "bench = ackloop_dev.cli.bench:bench" in commands
    assert "dev = ackloop_dev.cli.dev:app" in commands
    assert "deprecated" not in log
