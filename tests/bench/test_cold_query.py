"""Cold questions, end to end on the emulators: with every service scaled to zero, a question
starts the services it needs when its pushes arrive and is answered; the default layout,
``steps``, starts one for all, the ``per-step`` layout one per step kind on its way (ingest,
model_step, tool_step: never the dead-letter one). The scaled services start nothing before a
push, and a service that has scaled to zero closes the connections the push delivery kept to
it, which the next push replaces. The section runs as the benchmark runs it, whatever storage
emulator an earlier stack left named. No timing assertions: the figures are the benchmark's
output."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from ackloop_dev.bench.cold_query import (
    LAYOUTS,
    endpoint_paths,
    measure_on_own_emulators,
    request_timeout_s,
    table,
)
from ackloop_dev.devstack.emulators import free_port

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two samples of each layout, as ``ackloop bench`` takes them: on emulators of its own,
    after a stack of its own whose storage emulator it stopped (the environment still names
    it). The section's stacks keep files in memory, and the environment is given back."""
    stopped = f"http://127.0.0.1:{free_port()}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STORAGE_EMULATOR_HOST", stopped)
        patch.setenv("ACKLOOP_FILES_BUCKET", "ackloop-files")
        measured = asyncio.run(measure_on_own_emulators(
            2, list(LAYOUTS), tmp_path_factory.mktemp("cold-query")))
        assert os.environ["STORAGE_EMULATOR_HOST"] == stopped
    return measured


def test_each_cold_question_starts_what_its_layout_needs_and_is_answered(
        result: dict[str, Any]) -> None:
    per_step, steps = result["layouts"]["per-step"], result["layouts"]["steps"]
    assert per_step["samples"] == steps["samples"] == 2  # every question answered
    assert per_step["services_started_per_cold_query"] == 3
    assert set(per_step["start_s"]) == {"ingest", "model_step", "tool_step"}
    assert steps["services_started_per_cold_query"] == 1
    assert set(steps["start_s"]) == {"steps"}
    for figures in (per_step, steps):
        assert figures["cold_s"] > figures["warm_s"] > 0
        assert all(cpu > 0 for cpu in figures["start_cpu_s"].values())
    assert result["model"].startswith("google-genai")


def test_the_table_has_a_row_per_layout(result: dict[str, Any]) -> None:
    rows = table(result).splitlines()
    # The default layout first: the other's figures are compared with it.
    assert [row.split()[0] for row in rows] == ["layout", "steps", "per-step"]


@pytest.mark.parametrize(("layout", "kind", "endpoint"), [
    ("per-step", "ingest", ("ingest", "")),
    ("per-step", "dead_letter", ("dead_letter", "")),
    ("steps", "ingest", ("steps", "ingest")),
    ("steps", "tool_step", ("steps", "tool_step")),
])
def test_each_step_kind_is_pushed_to_the_service_and_path_that_serve_it(
        layout: str, kind: str, endpoint: tuple[str, str]) -> None:
    assert endpoint_paths(layout)[kind] == endpoint


def test_a_combined_service_gets_the_longest_request_timeout_of_its_kinds() -> None:
    assert request_timeout_s("steps") == max(request_timeout_s(k) for k in
                                             ("ingest", "model_step", "tool_step", "dead_letter"))
    assert request_timeout_s("ingest") < request_timeout_s("steps")


def test_the_bench_report_shows_the_cold_question(result: dict[str, Any]) -> None:
    from ackloop_dev.bench import report

    text = report.render({"meta": {}, "cold_query": result})
    assert "Cold question (every service scaled to zero) vs warm" in text
    assert table(result) in text

