"""The reference workload run on Temporal: the seed tutorial's agent loop with a scripted model.

The workflow is the seed's ``AgentWorkflow`` (a model activity, then one dynamic tool activity
per function call, until the model answers in text) with the seed's activity options. The
model is scripted and instant: it asks for the tool while fewer than
:data:`TOOL_CALLS_PER_RUN` tool results are in the contents, then answers. So every run is
model -> tool -> model -> tool -> model: 3 model activities and 2 tool activities.

Every activity execution is appended to an :class:`ExecutionLedger` (JSON lines, written
unbuffered at start and at end) so the benchmark can count executions and time the gaps
between steps, even across a SIGKILL of the worker.

This module imports ``temporalio`` at import time: only the benchmark imports it.
"""

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import annotated_types  # noqa: F401
    import pydantic_core  # noqa: F401
    from google.genai import types

WORKFLOW_NAME = "AgentWorkflow"
MODEL_ACTIVITY = "generate_content"
TOOL_NAME = "lookup"
TOOL_CALLS_PER_RUN = 2
MODEL_STEPS_PER_RUN = TOOL_CALLS_PER_RUN + 1
MODEL_NAME = "scripted-instant-model"
SYSTEM_INSTRUCTIONS = "You are a helpful agent that can use tools to help the user."

SEED_MODEL_START_TO_CLOSE = timedelta(seconds=60)
SEED_TOOL_START_TO_CLOSE = timedelta(seconds=30)
TUNED_HEARTBEAT_TIMEOUT = timedelta(seconds=2)
TUNED_STICKY_SCHEDULE_TO_START = timedelta(seconds=1)


@dataclass
class AgentInput:
    """Workflow input: the user's prompt and whether to use the tuned activity options."""

    prompt: str
    tuned: bool = False


@dataclass
class GeminiChatRequest:
    """Request parameters for a model call (same contract as the seed)."""

    model: str
    system_instruction: str
    contents: list[types.Content]
    tools: list[types.Tool]


@dataclass
class GeminiChatResponse:
    """Response from a model call (same contract as the seed)."""

    text: str | None
    function_calls: list[dict[str, Any]]
    raw_parts: list[types.Part]


def bench_tools() -> types.Tool:
    """The single tool the scripted model knows, declared as the seed declares its tools."""
    return types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name=TOOL_NAME,
                description="Look something up.",
                parameters=types.Schema(
                    type=types.Type.OBJECT,
                    properties={
                        "query": types.Schema(type=types.Type.STRING),
                        "call": types.Schema(type=types.Type.INTEGER),
                    },
                    required=["query"],
                ),
            )
        ]
    )


def count_tool_results(contents: Sequence[types.Content]) -> int:
    """How many function responses the conversation holds."""
    return sum(1 for content in contents for part in content.parts or [] if part.function_response)


def scripted_reply(contents: Sequence[types.Content]) -> GeminiChatResponse:
    """Decide like a model would, from the number of tool results already in the contents."""
    done = count_tool_results(contents)
    if done >= TOOL_CALLS_PER_RUN:
        text = f"Answer after {done} tool calls."
        return GeminiChatResponse(
            text=text, function_calls=[], raw_parts=[types.Part.from_text(text=text)]
        )
    args: dict[str, Any] = {"query": f"question {done}", "call": done}
    part = types.Part(function_call=types.FunctionCall(name=TOOL_NAME, args=args))
    return GeminiChatResponse(
        text=None, function_calls=[{"name": TOOL_NAME, "args": args}], raw_parts=[part]
    )


class ExecutionLedger:
    """Append-only JSON-lines record of activity executions.

    Each line is written with one ``os.write`` on an ``O_APPEND`` descriptor, so what was
    written survives a SIGKILL of the worker and several workers may share one file.
    """

    def __init__(self, path: str | None) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None

    def record(self, event: str) -> None:
        """Append ``event`` ("start" or "end") for the activity currently executing."""
        if self._fd is None:
            return
        info = activity.info()
        line = {
            "ev": event,
            "t": time.time(),
            "wf": info.workflow_id,
            "id": info.activity_id,
            "type": info.activity_type,
            "attempt": info.attempt,
            "pid": os.getpid(),
        }
        os.write(self._fd, (json.dumps(line) + "\n").encode())


async def sleep_in_step(seconds: float) -> None:
    """Sleep inside an activity, heartbeating if (and only if) a heartbeat timeout is set."""
    heartbeat_timeout = activity.info().heartbeat_timeout
    if not heartbeat_timeout:
        await asyncio.sleep(seconds)
        return
    interval = heartbeat_timeout.total_seconds() / 4
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        activity.heartbeat()
        await asyncio.sleep(min(interval, left))


class BenchActivities:
    """The scripted model activity and the seed's dynamic tool activity.

    ``first_tool_sleep_s`` makes the first tool call of every run last that long, so that the
    worker-kill test has a step in flight to kill; it is 0 for the throughput measurements.
    """

    def __init__(self, ledger: ExecutionLedger, first_tool_sleep_s: float = 0.0) -> None:
        self._ledger = ledger
        self._first_tool_sleep_s = first_tool_sleep_s

    @activity.defn(name=MODEL_ACTIVITY)
    async def generate_content(self, request: GeminiChatRequest) -> GeminiChatResponse:
        """The scripted instant model."""
        self._ledger.record("start")
        response = scripted_reply(request.contents)
        self._ledger.record("end")
        return response

    @activity.defn(dynamic=True)
    async def dynamic_tool_activity(self, args: Sequence[RawValue]) -> str:
        """Run the tool named by the activity type, as the seed does."""
        self._ledger.record("start")
        tool_name = activity.info().activity_type
        if tool_name != TOOL_NAME:
            raise ApplicationError(f"Unknown tool name: {tool_name}", non_retryable=True)
        tool_args = activity.payload_converter().from_payload(args[0].payload, dict)
        if self._first_tool_sleep_s > 0 and tool_args.get("call") == 0:
            await sleep_in_step(self._first_tool_sleep_s)
        result = f"result for {tool_args.get('query', '')}"
        self._ledger.record("end")
        return result


def activity_options(tuned: bool, start_to_close: timedelta) -> dict[str, Any]:
    """Activity options: the seed's (start-to-close only) or tuned (plus a heartbeat timeout)."""
    options: dict[str, Any] = {"start_to_close_timeout": start_to_close}
    if tuned:
        options["heartbeat_timeout"] = TUNED_HEARTBEAT_TIMEOUT
    return options


@workflow.defn(name=WORKFLOW_NAME)
class AgentWorkflow:
    """The seed's agentic loop: model activity, tool activities, until the model answers."""

    @workflow.run
    async def run(self, agent_input: AgentInput) -> str:
        """Loop until the model answers in text; return that text."""
        contents: list[types.Content] = [
            types.Content(role="user", parts=[types.Part.from_text(text=agent_input.prompt)])
        ]
        tools = [bench_tools()]
        while True:
            result = await workflow.execute_activity_method(
                BenchActivities.generate_content,
                GeminiChatRequest(
                    model=MODEL_NAME,
                    system_instruction=SYSTEM_INSTRUCTIONS,
                    contents=contents,
                    tools=tools,
                ),
                **activity_options(agent_input.tuned, SEED_MODEL_START_TO_CLOSE),
            )
            if not result.function_calls:
                return result.text or ""
            contents.append(types.Content(role="model", parts=result.raw_parts))
            for function_call in result.function_calls:
                tool_result = await self._handle_function_call(function_call, agent_input.tuned)
                contents.append(
                    types.Content(
                        role="user",
                        parts=[
                            types.Part.from_function_response(
                                name=function_call["name"], response={"result": tool_result}
                            )
                        ],
                    )
                )

    async def _handle_function_call(self, function_call: dict[str, Any], tuned: bool) -> str:
        """Execute a tool via the dynamic activity and return its result."""
        result: str = await workflow.execute_activity(
            function_call["name"],
            function_call.get("args", {}),
            result_type=str,
            **activity_options(tuned, SEED_TOOL_START_TO_CLOSE),
        )
        return result
