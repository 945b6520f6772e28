"""The judge: a Gemini model that reads a case's question and answer against a rubric.

Its verdict (pass or fail), its score and its reason are the case's ``judge`` results; what
its calls cost is the eval's own cost (:data:`JUDGE_SPEND`), apart from what the cases' runs
cost. It calls the model the deployment's settings name (``ACKLOOP_MODEL``; Gemini's API key
or Vertex AI, ``ACKLOOP_GEMINI_BASE_URL``), or the model client given to :func:`use_model`
(a test's, a script's). Without either it says so instead of passing: a judge that could not
judge is a failed check, never a silent pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext

from ackloop.domain.cost import Cost, Spend, price
from ackloop.model.base import ModelClient, ModelRequest

JUDGE_INSTRUCTIONS = (
    "You grade an AI agent's answer to a user's question against a rubric. Read the rubric, "
    "the question and the answer; decide whether the answer meets the rubric. Answer with a "
    "JSON object: pass (true or false), score (0 to 1: how well it meets the rubric) and "
    "reason (one or two sentences that say why).")
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pass": {"type": "boolean"}, "score": {"type": "number"},
                   "reason": {"type": "string"}},
    "required": ["pass", "score", "reason"],
}


@dataclass
class JudgeSpend:
    """What the judges of this process have cost: the eval's own spend."""

    calls: int = 0
    cost: Cost = field(default_factory=Cost)

    def add(self, cost: Cost) -> None:
        self.calls += 1
        self.cost = self.cost.plus(cost)


JUDGE_SPEND = JudgeSpend()
_client: list[ModelClient] = []


def use_model(client: ModelClient | None) -> None:
    """The model client every judge of this process calls (None: the settings' again)."""
    _client.clear()
    if client is not None:
        _client.append(client)


def _model_client() -> tuple[ModelClient, str]:
    from ackloop.config.settings import Settings

    settings = Settings()
    if _client:
        return _client[0], settings.model
    if settings.resolved_model_provider() != "gemini":
        raise LookupError("the judge needs Gemini: set GEMINI_API_KEY (or "
                          "ACKLOOP_USE_VERTEXAI=true), or give the eval a judge model")
    from ackloop.model.gemini import build_gemini_model

    client = build_gemini_model(settings)
    _client.append(client)
    return client, settings.model


def _prompt(rubric: str, question: str | None, answer: Any, expected: Any) -> str:
    lines = [f"Rubric:\n{rubric}"]
    if question is not None:
        lines.append(f"Question:\n{question}")
    if expected is not None:
        lines.append(f"Expected answer:\n{expected}")
    said = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    lines.append(f"Answer:\n{said}")
    return "\n\n".join(lines)


@dataclass(repr=False)
class Judge(Evaluator[Any, Any, Any]):
    """A Gemini model grades the answer against ``rubric``: a ``judge`` assertion (its
    verdict, its reason) and a ``judge_score``. ``model``: which model (None: the
    deployment's ``ACKLOOP_MODEL``)."""

    rubric: str
    model: str | None = None
    include_question: bool = True
    include_expected: bool = False

    async def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> dict[str, Any]:
        try:
            client, default_model = _model_client()
        except LookupError as exc:
            return {"judge": EvaluationReason(False, f"not judged: {exc}")}
        model = self.model or default_model
        question = getattr(ctx.inputs, "question", None) if self.include_question else None
        expected = ctx.expected_output if self.include_expected else None
        request = ModelRequest(
            model=model, system_instruction=JUDGE_INSTRUCTIONS, calls_allowed=False,
            contents=[{"role": "user", "parts": [
                {"text": _prompt(self.rubric, question, ctx.output, expected)}]}],
            response_schema=VERDICT_SCHEMA)
        turn = await client.generate(request)
        JUDGE_SPEND.add(price(Spend(model=model, prompt_tokens=turn.usage.prompt_tokens,
                                    output_tokens=turn.usage.output_tokens)))
        try:
            verdict = json.loads(turn.text or "")
            passed, score = bool(verdict["pass"]), float(verdict.get("score", 0.0))
            reason = str(verdict.get("reason", ""))
        except (ValueError, KeyError, TypeError) as exc:
            return {"judge": EvaluationReason(False, f"the judge's answer is not a verdict "
                                              f"({exc}): {(turn.text or '')[:200]!r}")}
        return {"judge": EvaluationReason(passed, reason),
                "judge_score": max(0.0, min(1.0, score))}
