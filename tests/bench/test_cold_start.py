"""The cold start report's arithmetic: medians per figure, and the serial estimate of a run
whose every step's service starts from zero; the project's bytecode compiled first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ackloop_dev.bench import bytecode
from ackloop_dev.bench.cold_start import health_path, median_of, run_figures, table


def test_median_of_each_figure() -> None:
    samples = [{"cpu": 0.5, "wall": 1.0}, {"cpu": 0.7, "wall": 3.0}, {"cpu": 0.6, "wall": 2.0}]
    assert median_of(samples) == {"cpu": 0.6, "wall": 2.0}
    assert median_of([]) == {}


def test_the_serial_estimate_adds_each_step_functions_median_start() -> None:
    figures = run_figures(warm=[0.3, 0.4, 0.5], cold=[0.6, 0.8, 0.7],
                          restarts={"ingest": [1.0, 1.2, 1.1], "model_step": [2.0],
                                    "tool_step": [1.5, 1.5]})
    assert figures == {"warm_run_s": 0.4, "first_run_on_fresh_processes_s": 0.7,
                       "step_cold_starts_s": pytest.approx(4.6),
                       "serial_cold_run_estimate_s": pytest.approx(5.3)}


def test_the_table_has_a_row_per_target_and_the_api_is_probed_on_its_health_route() -> None:
    lines = table({"ingest": {"import_cpu_s": 0.5}, "api": {}}).splitlines()
    assert [line.split()[0] for line in lines] == ["target", "ingest", "api"]
    assert lines[1].split()[1] == "0.5"
    assert (health_path("api"), health_path("tool_step")) == ("healthz", "")


def test_the_projects_modules_are_compiled_as_the_image_has_them(tmp_path: Path) -> None:
    # The image's pip compiles ackloop; an editable checkout under PYTHONDONTWRITEBYTECODE has
    # no bytecode, and each process started would compile every module again.
    package = tmp_path / "shared" / "ackloop"
    package.mkdir(parents=True)
    (package / "module.py").write_text("X = 1\n")
    (tmp_path / "functions").mkdir()
    (tmp_path / "functions" / "main.py").write_text("Y = 2\n")
    bytecode.compile_sources(tmp_path)
    assert [p.name for p in (package / "__pycache__").iterdir()] == [
        f"module.{sys.implementation.cache_tag}.pyc"]
    assert not (tmp_path / "functions" / "__pycache__").exists()  # copied as they are


def test_the_steps_service_is_probed_with_every_step_kinds_module() -> None:
    # The default layout's one service: its import figures count all four step kinds'
    # modules (the model step's engine among them) and its model client built before serving.
    import os

    from ackloop_dev.bench.cold_start import TARGETS, probe
    from ackloop_dev.devstack.stack import project_root

    assert TARGETS[0] == "steps"
    env = {**os.environ, "ACKLOOP_PROJECT_ID": "p", "ACKLOOP_MODEL_PROVIDER": "scripted",
           "PUBSUB_EMULATOR_HOST": "127.0.0.1:1", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"}
    steps = probe("steps", env, project_root())
    ingest = probe("ingest", env, project_root())
    assert steps["import_modules"] > ingest["import_modules"]
    assert steps["deps_cpu_s"] > 0
