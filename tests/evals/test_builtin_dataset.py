"""The built-in eval dataset, ``examples/evals/builtin.yaml``, run offline as CI runs it.

Every case is a real run of the engine in process (the in-memory store), each agent of the
development catalog played by its own offline script, the weather agent's tools calling the
local sandbox of weather.gov and ip-api. The built-in agents pass every case; a weather agent
whose alerts tool was renamed fails the cases that need it, and says why in a way a person
reads: the expected call missing from the trajectory, the answer that is not the expected one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_evals import Case, Dataset

from ackloop import Agent
from ackloop.config.settings import Settings
from ackloop.evals import EvalInputs, EvalReport, EvalRunner, Trajectory, load_dataset
from ackloop.model.seed_agent import seed_agent_turn
from ackloop.tools.seed import seed_toolset
from ackloop.tools.toolset import ToolSet
from ackloop_dev.agents import catalog
from ackloop_dev.fakes.sandbox_apis import SandboxApis

DATASET = Path(__file__).resolve().parents[2] / "examples" / "evals" / "builtin.yaml"
WEATHER, TEAM = "default", "research-team"
ALERTS_TOOL = "get_weather_alerts"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxApis]:
    with SandboxApis() as apis:
        yield apis


@pytest.fixture
def settings(sandbox: SandboxApis) -> Settings:
    """The settings with weather.gov, ip-api and the IP echo pointing at the sandbox."""
    return sandbox.settings()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def described(report: EvalReport) -> str:
    """Each case that did not pass: its answer, its calls and why each check failed."""
    lines = []
    for case in report.cases:
        if case.passed:
            continue
        lines.append(f"{case.name} ({case.agent}): {case.error or ''}")
        lines.append(f"  answer: {case.answer!r}")
        lines.append(f"  calls: {case.trajectory}")
        for check in case.failures():
            lines.append(f"  {check.name}: {check.reason}")
    return "\n".join(lines)


def expects_call(case: Case[EvalInputs, Any, Any], tool: str) -> bool:
    """Whether one of the case's trajectory checks expects a call of ``tool``."""
    return any(isinstance(check, Trajectory) and any(e.name == tool for e in check.expected)
               for check in case.evaluators)


def test_the_dataset_has_cases_for_both_built_in_agents_and_every_kind_of_check() -> None:
    dataset = load_dataset(DATASET)
    assert dataset.name == "builtin"
    names = [case.name for case in dataset.cases]
    assert len(names) >= 20 and all(names) and len(set(names)) == len(names), names
    agents = Counter(case.inputs.agent for case in dataset.cases)
    assert set(agents) == {WEATHER, TEAM} and agents[WEATHER] >= 12 and agents[TEAM] >= 5, agents
    assert all(case.evaluators for case in dataset.cases)
    checks = {type(check).__name__ for case in dataset.cases for check in case.evaluators}
    assert checks >= {"Contains", "EqualsExpected", "Regex", "Status", "Trajectory",
                      "ForbiddenTools", "Children", "Handoffs", "Budget"}, checks
    modes = {check.mode for case in dataset.cases for check in case.evaluators
             if isinstance(check, Trajectory)}
    assert modes == {"exact", "in_order", "any_order"}
    assert any(case.inputs.history for case in dataset.cases)


async def test_the_built_in_agents_pass_every_case_offline(
        settings: Settings, http: httpx.AsyncClient) -> None:
    dataset = load_dataset(DATASET)
    report = await EvalRunner(agents=catalog(settings, http), settings=settings).run(
        dataset, source=str(DATASET))
    if not report.passed:
        print(described(report))
    assert report.summary.runs == len(dataset.cases) and report.summary.errors == 0
    assert report.passed, described(report)
    assert {case.agent for case in report.cases} == {WEATHER, TEAM}
    assert report.summary.tool_calls > 0 and report.summary.cost_usd > 0


def broken_weather_agent(settings: Settings, http: httpx.AsyncClient) -> Agent:
    """The weather agent with its alerts tool renamed ``get_alerts`` and other instructions:
    the same offline script, which finds no ``get_weather_alerts`` to call any more."""
    tools = ToolSet(dataclasses.replace(tool, name="get_alerts") if tool.name == ALERTS_TOOL
                    else tool for tool in seed_toolset(http, settings))
    return Agent(WEATHER, "Answer questions about the weather in one sentence.", tools,
                 script=seed_agent_turn)


async def test_a_weather_agent_without_its_alerts_tool_fails_with_a_diff_and_its_answer(
        settings: Settings, http: httpx.AsyncClient) -> None:
    dataset = load_dataset(DATASET)
    weather = Dataset[EvalInputs, Any, Any](
        name="builtin-weather",
        cases=[case for case in dataset.cases if case.inputs.agent == WEATHER])
    needs_alerts = {case.name for case in weather.cases if expects_call(case, ALERTS_TOOL)}
    assert len(needs_alerts) >= 8, needs_alerts

    report = await EvalRunner(agents=[broken_weather_agent(settings, http)],
                              settings=settings).run(weather)

    assert not report.passed
    failed = {case.name for case in report.cases if not case.passed}
    # Exactly the cases that need the alerts: where-am-I, the IP and the haikus still pass.
    assert failed == needs_alerts, described(report)
    for case in report.cases:
        if case.name not in needs_alerts:
            continue
        failures = case.failures()
        trajectory = "\n".join(f.reason or "" for f in failures if f.name.startswith(
            "trajectory"))
        assert any(line.startswith(f"  - {ALERTS_TOOL}(") for line in trajectory.splitlines()), (
            case.name, trajectory)
        assert ALERTS_TOOL not in " ".join(case.trajectory)
        # The answer is not an alerts summary, and the answer checks say so, quoting it.
        assert isinstance(case.answer, str) and "active weather alert" not in case.answer
        answer_checks = [f for f in failures if not f.name.startswith(("trajectory", "status"))]
        assert answer_checks, (case.name, failures)
        for check in answer_checks:
            assert check.reason is None or case.answer.lower() in check.reason.lower(), (
                case.name, check)
    texas = next(case for case in report.cases if case.name == "alerts-texas-by-name")
    assert texas.answer == f"I can't answer that: the tool {ALERTS_TOOL} is not available to me."
    (regex,) = [f for f in texas.failures() if f.name == "Regex"]
    assert regex.reason is not None and regex.reason.endswith(f"in {texas.answer!r}")
