"""``ackloop eval`` on a stack of real processes, as a user runs it: the cases as runs through
the queries topic (or the HTTP API), the report's files, capture and replay counted at the
model server and the tools' sandbox, and a function process killed in the middle of an eval."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from ackloop.domain.eval_reports import EvalReport
from tests.cli.conftest import ACKLOOP, Cli, user_env
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator]

DATASET = {
    "name": "stack",
    "cases": [
        {"name": "alerts-here", "inputs": "are there any weather alerts where I am?",
         "evaluators": [
             {"Contains": {"value": "norman", "case_sensitive": False}},
             {"Trajectory": {"calls": ["get_ip_address", "get_location_info",
                                       {"name": "get_weather_alerts",
                                        "args": {"state": "OK"}}], "mode": "exact"}},
             {"Budget": {"model_calls": 4, "tool_calls": 3}}]},
        {"name": "alerts-texas", "inputs": "any weather alerts in Texas?",
         "evaluators": [{"Trajectory": {"calls": [{"name": "get_weather_alerts",
                                                   "args": {"state": "TX"}}]}}]},
        {"name": "team", "inputs": {"question": "What limits a durable agent's speed?",
                                    "agent": "research-team"},
         "evaluators": [{"Children": {"agents": ["researcher", "critic"]}},
                        {"Handoffs": {"agents": ["writer"]}}]},
    ],
}


def _cli(tmp_path: Path) -> Cli:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return Cli(home)


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_an_eval_on_the_stack_reports_and_its_runs_replay_with_no_call(
        stack: RunningStack, tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    directory = stack.state.directory
    dataset = _write(tmp_path / "stack.yaml", DATASET)
    out = cli("eval", str(dataset), "--directory", directory, "--json", str(tmp_path / "r.json"),
              "--junit", str(tmp_path / "r.xml"), "--markdown", str(tmp_path / "r.md"),
              timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    report = EvalReport.model_validate_json((tmp_path / "r.json").read_text())
    assert (report.summary.runs, report.summary.passed) == (3, 3)
    assert report.summary.cost_usd > 0 and report.summary.model_calls >= 4 + 2 + 5
    assert all(c.link and c.link.startswith(stack.state.api_url) for c in report.cases)
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("3", "0")
    assert "| alerts-here | ✅ pass |" in (tmp_path / "r.md").read_text()

    # Capture the three runs, replay them: the same calls, and nothing reaches the model
    # server or the tools' APIs.
    captured = tmp_path / "captured.yaml"
    run_ids = [str(c.run_id) for c in report.cases]
    out = cli("eval", "capture", *run_ids, "--directory", directory, "--output", str(captured))
    assert out.returncode == 0, out.stderr
    model_before = stack.model_stats()["requests"]
    tools_before = stack.sandbox_stats().get("requests", 0)
    out = cli("eval", str(captured), "--directory", directory, "--json",
              str(tmp_path / "replay.json"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    replay = EvalReport.model_validate_json((tmp_path / "replay.json").read_text())
    assert stack.model_stats()["requests"] == model_before
    assert stack.sandbox_stats().get("requests", 0) == tools_before
    assert replay.summary.replayed == 3 and replay.passed
    recorded = {c.run_id: c.trajectory for c in report.cases}
    for case in replay.cases:
        original = case.name.rsplit("-", 2)[-2] + "-" + case.name.rsplit("-", 1)[-1]
        assert case.trajectory == recorded[original]


def test_an_eval_through_the_http_api(stack: RunningStack, tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    dataset = _write(tmp_path / "one.yaml", {"name": "http", "cases": DATASET["cases"][:1]})
    out = cli("eval", str(dataset), "--url", stack.state.api_url, "--json",
              str(tmp_path / "r.json"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    report = EvalReport.model_validate_json((tmp_path / "r.json").read_text())
    assert report.passed and report.target == f"http {stack.state.api_url}"


@pytest.mark.slow
async def test_a_function_killed_during_an_eval_the_eval_completes_counting_each_case_once(
        processes_back: RunningStack, tmp_path: Path) -> None:
    running = processes_back
    served_before = running.model_stats()["requests"]
    cli = _cli(tmp_path)
    cases = [{"name": f"c{i:02d}", "inputs": f"any weather alerts in {state}?",
              "evaluators": [{"Trajectory": {"calls": ["get_weather_alerts"]}}]}
             for i, state in enumerate(["Texas", "Ohio", "Kansas", "Utah", "Iowa", "Maine",
                                        "Idaho", "Nevada", "Oregon", "Georgia"])]
    dataset = _write(tmp_path / "kill.yaml", {"name": "kill", "cases": cases})
    eval_id = f"ev-kill-{uuid.uuid4().hex[:6]}"
    process = await asyncio.create_subprocess_exec(
        ACKLOOP, "eval", str(dataset), "--directory", running.state.directory,
        "--eval-id", eval_id, "--concurrency", "10", "--json", str(tmp_path / "r.json"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=user_env(cli.home), cwd=cli.home)
    store = running.store()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the eval's runs have started: kill a step function
        runs = await store.runs.recent_runs(limit=50)
        if sum(r.request_id.startswith(eval_id) for r in runs) >= 3:
            break
        await asyncio.sleep(0.05)
    running.stack.processes["model_step"].kill()
    await asyncio.to_thread(running.stack.restart_service, "model_step")
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=300)
    assert process.returncode == 0, (stdout + stderr).decode()
    report = EvalReport.model_validate_json((tmp_path / "r.json").read_text())
    assert (report.summary.runs, report.summary.passed) == (10, 10)
    assert sorted(c.name for c in report.cases) == [c["name"] for c in cases]
    runs = [r for r in await store.runs.recent_runs(limit=200)
            if r.request_id.startswith(eval_id)]
    assert len(runs) == 10 == len({r.run_id for r in runs})
    assert {r.run_id for r in runs} == {c.run_id for c in report.cases}
    for run in runs:
        steps = await store.steps.list_steps(run.run_id)
        assert [s.key for s in steps] == ["0000-model", "0000-tool-000", "0001-model"], steps
    # Each case's two model calls counted once; at the model server, a call in flight when its
    # process died may have been made again (its answer was lost with it), no more.
    assert report.summary.model_calls == 20
    served = running.model_stats()["requests"] - served_before
    print(f"model calls recorded {report.summary.model_calls}, served by the model {served}")
    assert 20 <= served <= 20 + len(cases), served


def test_the_dataset_fixture_is_valid_yaml(tmp_path: Path) -> None:
    from ackloop.evals.cases import load_dataset

    loaded = load_dataset(_write(tmp_path / "d.yaml", DATASET))
    assert [c.name for c in loaded.cases] == ["alerts-here", "alerts-texas", "team"]
    assert json.loads(loaded.cases[2].inputs.model_dump_json())["agent"] == "research-team"
