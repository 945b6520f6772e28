"""Metrics and log lines of real runs on a local stack of real processes: the points the
functions write to the stack's metrics directory, and the labels and trace of their log lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ackloop.domain.records import RunRecord
from ackloop.telemetry import metrics as names
from ackloop.telemetry.metrics_file import Series
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]
STEP_FUNCTIONS = ("model_step", "tool_step")


def _total(series: list[Series], name: str, **attributes: str) -> float:
    return sum(s.value for s in series if s.name == name
               and all(s.attributes.get(k) == v for k, v in attributes.items()))


def _step_deliveries(stack: RunningStack) -> int:
    """Pushes the step functions answered, as the push delivery that pushed them counted them
    (a source apart from the metrics under test)."""
    return sum(sum(stack.push_answers(f).values()) for f in STEP_FUNCTIONS)


def _log_entries(stack: RunningStack, service: str, run: RunRecord) -> list[dict[str, Any]]:
    entries = []
    for line in Path(stack.state.logs[service]).read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            labels = entry.get("logging.googleapis.com/labels", {})
            if labels.get("run_id") == run.run_id:
                entries.append(entry)
    return entries


async def test_one_run_and_one_503_in_metrics_and_log_labels(
        fresh_stack: Callable[..., RunningStack], tmp_path: Path) -> None:
    stack = fresh_stack(push_time_scale=0.1,
                        extra_env={"ACKLOOP_TRACE_DIR": str(tmp_path / "traces")})
    run, steps = await stack.wait_run(stack.ask("What is the weather in Norman, Oklahoma?"))
    assert run.stop_reason is not None and run.stop_reason.value == "answered"
    deliveries = _step_deliveries(stack)
    assert deliveries >= len(steps)

    def complete(series: list[Series]) -> bool:
        counted = sum(s.count for s in series if s.name == names.STEP_DURATION)
        # Every process exports on its own second: wait for ingest's count too.
        return (_total(series, names.RUNS_FINISHED) == 1 and counted == deliveries
                and _total(series, names.RUNS_STARTED) >= 1)

    series = await stack.settled_metrics(complete)
    assert _total(series, names.RUNS_STARTED, agent=run.agent) == 1
    assert _total(series, names.RUNS_FINISHED, status="completed", stop_reason="answered") == 1
    assert sum(s.count for s in series if s.name == names.STEP_DURATION) == deliveries
    assert (sum(s.count for s in series if s.name == names.STEP_DURATION
                and s.attributes["kind"] == "model")
            == stack.push_answers("model_step")["204"] + stack.push_answers("model_step")["200"])
    assert _total(series, names.MODEL_TOKENS, type="prompt") == run.usage.prompt_tokens > 0
    assert _total(series, names.MODEL_TOKENS, type="output") == run.usage.output_tokens > 0
    assert _total(series, names.PUSH_ANSWERS, **{"class": "5xx"}) == 0
    # What each function counted it answered is what the push delivery saw answered.
    for kind, function in (("model", "model_step"), ("tool", "tool_step")):
        for status, pushes in stack.push_answers(function).items():
            assert _total(series, names.PUSH_ANSWERS, function=kind, status=status) == pushes
    # The committed steps' cost ledger, in dollars (the run's ingest is not a step).
    step_usd = sum(s.cost.usd for s in steps if s.cost is not None)
    assert step_usd > 0 and _total(series, names.COST_USD) == pytest.approx(step_usd)

    # A model that asks for 21 s (more than a request waits for a retry-after) makes the
    # delivery answer 503; the redelivery waits out the rest inside its request and runs.
    stack.schedule_model_faults("429:21")
    second, _ = await stack.wait_run(stack.ask("tell me a joke"), timeout=120)
    assert second.stop_reason is not None and second.stop_reason.value == "answered"
    series = await stack.settled_metrics(lambda s: _total(s, names.RUNS_FINISHED) == 2)
    assert _total(series, names.PUSH_ANSWERS, **{"class": "5xx"}) == 1
    assert _total(series, names.PUSH_ANSWERS, function="model", status="503") == 1
    assert _total(series, names.STEP_RETRIES, kind="model") == 1
    assert sum(s.count for s in series if s.name == names.STEP_DURATION
               and s.attributes["outcome"] == "retry") == 1

    # The 503's own line, from the model step's process: the delivery's labels and trace.
    released = [e for e in _log_entries(stack, "model_step", second)
                if "will be redelivered" in e["message"]]
    assert len(released) == 1, _log_entries(stack, "model_step", second)
    entry = released[0]
    assert entry["logging.googleapis.com/labels"] | {"python_logger": ""} == {
        "python_logger": "", "run_id": second.run_id, "step": "0000-model", "attempt": "1",
        "agent": second.agent, "conversation_id": second.conversation_id}
    assert entry["logging.googleapis.com/trace"] == (
        f"projects/{stack.settings.project_id}/traces/{second.trace_id}")
    assert len(entry["logging.googleapis.com/spanId"]) == 16
