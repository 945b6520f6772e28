"""Programmable scripted turns and the reference workload: stateless, realistic turns."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ackloop.domain.errors import ModelPermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.model.base import ModelRequest
from ackloop.model.scripted import ScriptedModel, reference_workload_script
from ackloop.model.turns import calls_turn, text_turn

QUESTION = {"role": "user", "parts": [{"text": "go"}]}
ECHO_TOOL = [{"name": "echo", "description": "Echo."}]


async def test_from_turns_plays_text_parallel_calls_and_signatures_in_order(
    run_loop: Any,
) -> None:
    model = ScriptedModel.from_turns(
        [
            calls_turn(
                [FunctionCall(name="echo", args={"n": 1}, id="a"), ("echo", {"n": 2})],
                thought_signature=b"sig",
            ),
            text_turn("both echoed"),
        ]
    )
    outcome = await run_loop(model, "go", {"echo": lambda args: {"result": args}}, ECHO_TOOL)

    first_parts = outcome.contents[1]["parts"]
    assert outcome.tool_calls == [("echo", {"n": 1}), ("echo", {"n": 2})]
    assert outcome.answer == "both echoed"
    assert first_parts[0]["function_call"] == {"name": "echo", "args": {"n": 1}, "id": "a"}
    assert base64.urlsafe_b64decode(first_parts[0]["thought_signature"]) == b"sig"
    assert "thought_signature" not in first_parts[1]  # Gemini signs the first call only
    assert model.calls == len(model.requests) == 2


async def test_from_turns_is_stateless_and_says_when_it_runs_out() -> None:
    model = ScriptedModel.from_turns([text_turn("only answer")])
    request = ModelRequest(model="m", system_instruction="", contents=[QUESTION])
    again = await model.generate(request)  # a redelivery gets the same turn
    later = request.model_copy(
        update={"contents": [QUESTION, {"role": "model", "parts": again.parts}, QUESTION]}
    )

    assert (await model.generate(request)).text == "only answer" == again.text
    with pytest.raises(ModelPermanentError) as caught:
        await model.generate(later)
    assert caught.value.reason == "model_script_exhausted"


async def test_reference_workload_is_three_model_turns_and_two_tool_calls(run_loop: Any) -> None:
    model = ScriptedModel(reference_workload_script("echo", {"n": 1}))
    outcome = await run_loop(model, "go", {"echo": lambda args: {"result": "ok"}}, ECHO_TOOL)

    assert outcome.model_turns == 3
    assert outcome.tool_calls == [("echo", {"n": 1}), ("echo", {"n": 1})]
    assert outcome.answer == "Reference workload done."


async def test_turns_carry_realistic_usage_and_finish_reason() -> None:
    request = ModelRequest(model="m", system_instruction="be kind", contents=[QUESTION])
    turn = await ScriptedModel.from_turns([text_turn("a b c")]).generate(request)
    built = text_turn("a b c", request=request)

    assert turn.finish_reason == "STOP" and turn.parts == [{"text": "a b c"}]
    assert built.usage.model_calls == 1 and built.usage.output_tokens > 0
    assert built.usage.total_tokens == built.usage.prompt_tokens + built.usage.output_tokens


@pytest.mark.parametrize(
    "contents",
    [
        [],
        [{"role": "system", "parts": [{"text": "hi"}]}],
        [{"role": "user", "parts": [{"unknown_field": 1}]}],
    ],
)
async def test_requests_gemini_would_reject_are_rejected(contents: list[JsonDict]) -> None:
    request = ModelRequest(model="m", system_instruction="", contents=contents)

    with pytest.raises(ModelPermanentError) as caught:
        await ScriptedModel().generate(request)
    assert caught.value.reason == "model_invalid_request"
