"""The local stack runs the services of either deployment layout: by default (``ackloop dev
up``) the steps service, which serves every step kind under ``/<kind>``, and the API, each
subscription pushing to its kind's path there; or a service per step kind."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ackloop.testing.localstack import StackState
from ackloop_dev.cli import dev
from ackloop_dev.devstack.stack import FUNCTIONS, LAYOUTS, LocalStack, StackOptions


def _stack(tmp_path: Path, services: tuple[str, ...]) -> LocalStack:
    stack = LocalStack(StackOptions(directory=tmp_path, services=services, base_port=9000))
    stack.state = StackState(str(tmp_path), "p", 1, 2)
    stack.state.ports = {"ingest": 9000, "model_step": 9001, "tool_step": 9002,
                         "dead_letter": 9003, "api": 9004, "steps": 9005}
    return stack


def test_under_the_steps_layout_every_kind_is_pushed_to_its_path_on_the_steps_service(
        tmp_path: Path) -> None:
    endpoints = _stack(tmp_path, LAYOUTS["steps"]).endpoints()
    assert endpoints == {kind: f"http://127.0.0.1:9005/{kind}" for kind in FUNCTIONS}


def test_under_the_per_step_layout_every_kind_is_pushed_to_its_own_service(
        tmp_path: Path) -> None:
    endpoints = _stack(tmp_path, LAYOUTS["per_step"]).endpoints()
    assert endpoints == {"ingest": "http://127.0.0.1:9000/", "model_step": "http://127.0.0.1:9001/",
                         "tool_step": "http://127.0.0.1:9002/",
                         "dead_letter": "http://127.0.0.1:9003/"}


def test_the_steps_service_listens_on_a_port_of_its_own(tmp_path: Path) -> None:
    planned = LocalStack(StackOptions(directory=tmp_path, services=LAYOUTS["steps"],
                                      sweep_every_s=None)).planned_ports()
    assert {name: planned[name] for name in ("steps", "api")} == {"steps": 8095, "api": 8094}
    assert not set(FUNCTIONS) & set(planned)


def test_dev_up_runs_the_steps_layout_unless_told_per_step() -> None:
    # The option's default, as `ackloop dev up --help` states it.
    result = CliRunner().invoke(dev.app, ["up", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--layout" in result.output and "[default: steps]" in result.output
