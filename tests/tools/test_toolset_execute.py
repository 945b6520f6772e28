"""ToolSet.execute: argument shapes, every failure path, caps and final results."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from pydantic import BaseModel, Field

from ackloop.domain.wire import FunctionCall
from ackloop.tools.base import ToolContext, ToolOutcome
from ackloop.tools.definition import tool
from ackloop.tools.errors import FinalResult, ToolError
from ackloop.tools.toolset import ToolSet


class StateRequest(BaseModel):
    """Which state."""

    state: str = Field(description="Two-letter code.", pattern=r"^[A-Z]{2}$")
    limit: int = Field(default=3, ge=1, le=10)


@tool
async def echo_state(request: StateRequest, context: ToolContext) -> dict[str, object]:
    """Echo the state back, with the run it ran for.

    Args:
        request: what to echo.
    """
    return {"state": request.state, "limit": request.limit, "run": context.run_id}


def call(name: str, **args: object) -> FunctionCall:
    return FunctionCall(name=name, args=args)


async def run(tools: ToolSet, fc: FunctionCall, context: ToolContext) -> ToolOutcome:
    return await tools.execute(fc, context)


async def test_flat_arguments_are_validated_and_passed(context: ToolContext) -> None:
    outcome = await run(ToolSet([echo_state]), call("echo_state", state="CA"), context)
    assert outcome == ToolOutcome(response={"result": {"state": "CA", "limit": 3, "run": "run-1"}})


async def test_arguments_nested_under_the_parameter_name_are_accepted(
    context: ToolContext,
) -> None:
    outcome = await run(
        ToolSet([echo_state]), call("echo_state", request={"state": "NY", "limit": 5}), context
    )
    assert outcome.response == {"result": {"state": "NY", "limit": 5, "run": "run-1"}}


async def test_arguments_nested_under_another_single_key_are_accepted(
    context: ToolContext,
) -> None:
    outcome = await run(ToolSet([echo_state]), call("echo_state", args={"state": "TX"}), context)
    assert outcome.response["result"]["state"] == "TX"


async def test_invalid_arguments_name_the_field_and_the_problem(context: ToolContext) -> None:
    outcome = await run(ToolSet([echo_state]), call("echo_state", state="Texas", limit=0), context)
    assert outcome.is_error and not outcome.final
    error = outcome.response["error"]
    assert error.startswith("invalid arguments for echo_state: ")
    assert "state: String should match pattern '^[A-Z]{2}$' (got 'Texas')" in error
    assert "limit: Input should be greater than or equal to 1 (got 0)" in error
    assert "Accepted arguments: state, limit" in error


async def test_nested_invalid_arguments_report_the_inner_problem(context: ToolContext) -> None:
    outcome = await run(ToolSet([echo_state]), call("echo_state", request={}), context)
    assert outcome.is_error
    assert "state: is required" in outcome.response["error"]


async def test_unknown_tool_names_the_available_tools(context: ToolContext) -> None:
    outcome = await run(ToolSet([echo_state]), call("get_weather"), context)
    assert outcome.is_error
    assert outcome.response == {"error": "unknown tool 'get_weather'; available tools: echo_state"}


async def test_tool_error_message_reaches_the_model_masked(context: ToolContext) -> None:
    @tool
    async def lookup() -> str:
        """Look something up."""
        raise ToolError("upstream refused https://bot:hunter2@api.example.com; try later")

    outcome = await run(ToolSet([lookup]), call("lookup"), context)
    assert outcome.is_error
    assert outcome.response == {
        "error": "upstream refused https://bot:***@api.example.com; try later"
    }


async def test_unexpected_exception_gives_the_model_its_type_only(
    context: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    async def fragile() -> str:
        """Break."""
        raise RuntimeError("GET https://api.example.com/v1?api_key=s3cr3t-value failed")

    with caplog.at_level(logging.WARNING, logger="ackloop.tools"):
        outcome = await run(ToolSet([fragile]), call("fragile"), context)

    assert outcome.response == {"error": "tool failed with RuntimeError"}
    assert outcome.is_error
    logged = caplog.text
    assert "RuntimeError" in logged and "api_key=***" in logged
    assert "s3cr3t-value" not in logged
    assert "run=run-1" in logged


async def test_known_secrets_are_masked_in_results(context: ToolContext) -> None:
    @tool
    async def leak() -> str:
        """Return a secret by mistake."""
        return "the key is zq81-literal-secret"

    outcome = await run(
        ToolSet([leak], known_secrets=["zq81-literal-secret"]), call("leak"), context
    )
    assert outcome.response == {"result": "the key is ***"}


async def test_secrets_in_a_json_result_are_masked(context: ToolContext) -> None:
    @tool
    async def config() -> dict[str, object]:
        """Show config."""
        return {"api_key": "abc123", "url": "https://u:pw@db.example.com", "n": 1}

    outcome = await run(ToolSet([config]), call("config"), context)
    assert outcome.response == {
        "result": {"api_key": "***", "url": "https://u:***@db.example.com", "n": 1}
    }


async def test_a_slow_tool_times_out_with_a_message_for_the_model(context: ToolContext) -> None:
    @tool(timeout_seconds=0.05)
    async def slow() -> str:
        """Take long."""
        await asyncio.sleep(5)
        return "never"

    outcome = await run(ToolSet([slow]), call("slow"), context)
    assert outcome.is_error
    assert outcome.response["error"].startswith("slow timed out after 0.05 s")


async def test_the_context_timeout_caps_the_tool_timeout() -> None:
    @tool(timeout_seconds=30)
    async def slow() -> str:
        """Take long."""
        await asyncio.sleep(5)
        return "never"

    tight = ToolContext(run_id="r", step_key="s", idempotency_key="s", timeout_seconds=0.05)
    outcome = await run(ToolSet([slow]), call("slow"), tight)
    assert outcome.response["error"].startswith("slow timed out after 0.05 s")


async def test_a_timeout_error_raised_by_the_tool_itself_is_unexpected(
    context: ToolContext,
) -> None:
    @tool
    async def raises_timeout() -> str:
        """Fail like a client library."""
        raise TimeoutError("socket read timed out")

    outcome = await run(ToolSet([raises_timeout]), call("raises_timeout"), context)
    assert outcome.response == {"error": "tool failed with TimeoutError"}


async def test_long_text_output_is_truncated_with_a_marker(context: ToolContext) -> None:
    @tool(max_output_bytes=1024)
    async def chatty() -> str:
        """Say a lot."""
        return "é\n" * 5000

    outcome = await run(ToolSet([chatty]), call("chatty"), context)
    result = outcome.response["result"]
    assert len(json.dumps(outcome.response, ensure_ascii=False).encode()) <= 1024
    assert result.endswith("bytes omitted]")
    assert "...[truncated: " in result


async def test_large_json_output_is_truncated_to_text(context: ToolContext) -> None:
    @tool
    async def dump() -> list[dict[str, int]]:
        """Return much data."""
        return [{"i": i} for i in range(10_000)]

    outcome = await run(ToolSet([dump]), call("dump"), context)
    result = outcome.response["result"]
    assert isinstance(result, str) and result.startswith('[{"i": 0}, {"i": 1}')
    assert len(json.dumps(outcome.response).encode()) <= 16 * 1024


async def test_returning_a_final_result_ends_the_run(context: ToolContext) -> None:
    @tool(retry_safe=False)
    async def submit(request: StateRequest) -> FinalResult:
        """Submit and finish."""
        return FinalResult({"submitted": request.state})

    outcome = await run(ToolSet([submit]), call("submit", state="WA"), context)
    assert outcome == ToolOutcome(response={"result": {"submitted": "WA"}}, final=True)


async def test_raising_a_final_result_ends_the_run(context: ToolContext) -> None:
    @tool
    async def finish() -> str:
        """Finish from deep inside."""
        raise FinalResult("all done")

    outcome = await run(ToolSet([finish]), call("finish"), context)
    assert outcome.final and not outcome.is_error
    assert outcome.response == {"result": "all done"}


async def test_a_model_result_is_dumped_as_json(context: ToolContext) -> None:
    @tool
    async def as_model(request: StateRequest) -> StateRequest:
        """Return the model."""
        return request

    outcome = await run(ToolSet([as_model]), call("as_model", state="OR"), context)
    assert outcome.response == {"result": {"state": "OR", "limit": 3}}


async def test_a_result_that_is_not_json_is_a_failure(context: ToolContext) -> None:
    @tool
    async def odd() -> object:
        """Return something odd."""
        return object()

    outcome = await run(ToolSet([odd]), call("odd"), context)
    assert outcome.is_error
    assert outcome.response["error"].startswith("tool failed with ")


async def test_retry_safe_is_exposed_per_tool() -> None:
    @tool(retry_safe=False)
    async def send_email() -> str:
        """Send an email."""
        return "sent"

    tools = ToolSet([echo_state, send_email])
    assert tools.is_retry_safe("echo_state") is True
    assert tools.is_retry_safe("send_email") is False
    assert tools.is_retry_safe("nope") is True
    assert tools.names == ["echo_state", "send_email"]


async def test_cancellation_propagates(context: ToolContext) -> None:
    @tool
    async def slow() -> str:
        """Take long."""
        await asyncio.sleep(5)
        return "never"

    task = asyncio.create_task(ToolSet([slow]).execute(call("slow"), context))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
