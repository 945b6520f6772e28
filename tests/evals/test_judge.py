"""The judge through the real google-genai client, against a local Gemini-compatible server:
its verdict and reason become the case's results, its cost the eval's own."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pydantic_evals import Case, Dataset

from ackloop import Agent, FunctionModel, text
from ackloop.evals import EvalInputs, EvalRunner, Judge
from ackloop.evals import judge as judging
from tests.support.json_server import json_server


def gemini_answer(verdict: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model",
                                        "parts": [{"text": json.dumps(verdict)}]},
                            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 30,
                              "totalTokenCount": 150},
            "modelVersion": "gemini-3-flash-preview"}


@pytest.fixture
def judge_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    received: list[Any] = []

    def respond(path: str, headers: Mapping[str, str]) -> tuple[int, Any]:
        said = json.dumps(received[-1])
        passed = "haiku" in said and "Leaves fall" in said
        return 200, gemini_answer({"pass": passed, "score": 0.9 if passed else 0.1,
                                   "reason": "a haiku" if passed else "not a haiku"})

    with json_server(respond, received) as url:
        monkeypatch.setenv("ACKLOOP_GEMINI_API_KEY", "test-key")
        monkeypatch.setenv("ACKLOOP_GEMINI_BASE_URL", url)
        judging.use_model(None)
        yield received
        judging.use_model(None)


async def test_the_judge_records_its_verdict_its_reason_and_its_cost(
        judge_server: list[Any]) -> None:
    poet = Agent("poet", "Answer in haikus.",
                 script=FunctionModel(lambda c: text("Leaves fall on still ponds")))
    dull = Agent("dull", "Answer plainly.", script=FunctionModel(lambda c: text("It is autumn.")))
    rubric = "The answer is a haiku about the season asked about."
    report = await EvalRunner(agents=[poet, dull]).run(Dataset[EvalInputs, Any, Any](
        name="judged", cases=[
            Case(name="poem", inputs=EvalInputs(question="autumn?", agent="poet"),
                 evaluators=(Judge(rubric),)),
            Case(name="prose", inputs=EvalInputs(question="autumn?", agent="dull"),
                 evaluators=(Judge(rubric),))]))
    by_name = {c.name: {k.name: (k.value, k.reason) for k in c.checks} for c in report.cases}
    assert by_name["poem"]["judge"] == (True, "a haiku")
    assert by_name["poem"]["judge_score"][0] == pytest.approx(0.9)
    assert by_name["prose"]["judge"] == (False, "not a haiku")
    assert len(judge_server) == 2
    body = json.dumps(judge_server[0])
    assert rubric in body and "autumn?" in body  # the rubric and the question reach the judge
    assert report.summary.judge_calls == 2 and report.summary.eval_cost_usd > 0


async def test_a_judge_without_a_model_fails_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACKLOOP_GEMINI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    judging.use_model(None)
    agent = Agent("a", "x", script=FunctionModel(lambda c: text("ok")))
    report = await EvalRunner(agents=[agent]).run(Dataset[EvalInputs, Any, Any](
        name="unjudged", cases=[Case(name="c", inputs=EvalInputs(question="?", agent="a"),
                                     evaluators=(Judge("anything"),))]))
    (case,) = report.cases
    assert not case.passed
    assert {c.name: c.reason for c in case.failures()}["judge"].startswith(
        "not judged: the judge needs Gemini")
