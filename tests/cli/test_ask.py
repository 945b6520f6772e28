"""``ackloop ask`` against a whole stack (functions, push delivery, scripted model), found only
through ``--directory``: what it prints, in which stream, and its exit code, for each ending."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from ackloop.domain.keys import run_id_for_request
from tests.cli.conftest import Cli
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

WEATHER = "are there any weather alerts where I am?"


def _ask(cli: Cli, stack: RunningStack, *args: str) -> tuple[int, str, list[str]]:
    ran = cli("ask", *args, "--timeout", "90", "--directory", stack.state.directory)
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran.returncode, ran.stdout, ran.stderr.splitlines()


def test_an_answer_names_the_model_that_gave_it(cli: Cli, cli_stack: RunningStack) -> None:
    code, out, err = _ask(cli, cli_stack, WEATHER, "--request-id", "cli-weather-1")
    assert code == 0, err
    run_id = run_id_for_request("cli-weather-1")
    # The run's line is whole at 40 columns: it can be pasted into `ackloop runs show`.
    assert err[0] == f"run {run_id} (request cli-weather-1)"
    # Step lines (the answer's text may stream between them: see the test below).
    assert [line.split()[1] for line in err[1:-2] if line.startswith("  ✓ ")] == [
        "0000-model", "0000-tool-000", "0001-model", "0001-tool-000", "0002-model",
        "0002-tool-000", "0003-model"]
    assert err[-1].startswith(f"run {run_id} completed (4 model call(s), 3 tool call(s), ")
    assert err[-1].endswith("; answered by scripted-seed-1 (the scripted offline model)")
    assert "Tornado Watch" in out
    # What the run cost, counted by its functions: one line before the outcome.
    cost = re.fullmatch(r"cost \$(\d+\.\d{6}): ([\d,]+) prompt \+ ([\d,]+) output tokens, "
                        r"([\d,]+) Firestore reads \+ ([\d,]+) writes, ([\d,]+) Pub/Sub bytes, "
                        r"8 request\(s\) \d+\.\d\d s \(list prices of \d{4}-\d\d-\d\d\)", err[-2])
    assert cost is not None, err[-2]
    usd, *counts = cost.groups()
    assert float(usd) > 0 and all(int(c.replace(",", "")) > 0 for c in counts), err[-2]


def test_a_budget_stop_says_which_budget_and_that_there_is_no_answer(
    cli: Cli, cli_stack: RunningStack
) -> None:
    code, out, err = _ask(cli, cli_stack, WEATHER, "--max-steps", "1")
    assert code == 1
    assert out == ""
    assert "stopped by its max_steps budget (1 model steps): no answer" in err[-1]
    assert err[-2].startswith("cost $")
    assert err[-3].split(None, 2)[1:] == [
        "0001-model", "run stopped before the model call: max_steps"]
    assert not any("answered by" in line for line in err)


def test_a_budget_stop_in_json(cli: Cli, cli_stack: RunningStack) -> None:
    ran = cli("ask", WEATHER, "--max-tool-calls", "0", "--json", "--timeout", "90",
              "--directory", cli_stack.state.directory)
    assert ran.returncode == 1
    result = json.loads(ran.stdout)
    assert (result["status"], result["budget_stop"], result["answer"]) == (
        "completed", "max_tool_calls", None)
    assert result["answered_by"] is None
    assert result["cost"]["usd"] > 0 and result["cost"]["prompt_tokens"] == sum(
        s["cost"]["prompt_tokens"] for s in result["steps"])


def test_an_unknown_agent_is_reported_at_once_with_its_reason(
    cli: Cli, cli_stack: RunningStack
) -> None:
    """The query is rejected into poison as soon as ingest reads it; ask reads that record and
    says so (before, it waited out its timeout and said "timeout")."""
    code, out, err = _ask(cli, cli_stack, "hi", "--agent", "nosuchagent")
    assert code == 1 and out == ""
    assert err[-1].startswith("query rejected (unknown_agent): no agent named 'nosuchagent'")
    assert err[-1].endswith("; no run was started")


def test_budgets_over_the_ceiling_are_reported_at_once(cli: Cli, cli_stack: RunningStack
                                                       ) -> None:
    ran = cli("ask", "hi", "--max-steps", "500", "--json", "--timeout", "90",
              "--directory", cli_stack.state.directory)
    assert ran.returncode == 1
    result = json.loads(ran.stdout)
    assert (result["status"], result["reason"]) == ("rejected", "over_ceiling")
    assert "max_steps 500 is above this deployment's ceiling" in result["error"]


def test_the_answer_streams_on_stderr_before_its_step_completes(
    cli: Cli, cli_stack: RunningStack
) -> None:
    """The fake model streams 6 characters every 150 ms: ask prints the text as it comes, on
    stderr, then the step line; stdout holds the answer alone."""
    admin = f"{cli_stack.fake_gemini}/_admin/stream"
    before = httpx.get(admin, timeout=5).json()
    httpx.post(admin, json={"delay": 0.15, "chunk_chars": 6}, timeout=5).raise_for_status()
    try:
        code, out, err = _ask(cli, cli_stack, "write me something about the quiet harbour")
    finally:
        httpx.post(admin, json=before, timeout=5).raise_for_status()
    assert code == 0, err
    answer = out.rstrip("\n")
    step = next(i for i, line in enumerate(err) if line.startswith("  ✓ 0000-model"))
    assert "\n".join(err[1:step]) == answer.rstrip("\n"), err
    assert len(answer) > 20 and "answers" in err[step]


def test_a_conversation_named_by_a_run_that_does_not_exist_is_refused_at_once(
    cli: Cli, cli_stack: RunningStack
) -> None:
    """A run id names the conversation that run started: ingest would wait for a run that does
    not exist (the query redelivered), so ask says so before publishing anything."""
    missing = run_id_for_request("cli-never-asked")
    code, out, err = _ask(cli, cli_stack, "hi", "--conversation", missing)
    assert code != 0 and out == ""
    assert f"no conversation {missing!r}: no run has that id" in "\n".join(err)
