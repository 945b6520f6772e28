"""Recorded runs as cases: what a run's model answered and its tools returned, played back.

``ackloop eval capture RUN_ID`` reads a run and the runs below it (:func:`capture`) into a
:class:`Cassette`: per run of the tree, each model turn (its text, its calls, its usage) and
each tool call (its arguments, its result, how its wait was decided). A case that carries one
replays it in process: today's engine and agents run against :class:`CassetteModel`, which
answers each model step with the recorded turn, and :class:`CassetteToolbox`, which answers
each tool call with the recorded result. No model is called and no tool runs.

While nothing changed, the replay makes the same calls in the same order and ends with the
same answer. Where the agent changed, it stops at the first step the recording cannot answer,
and says why (:class:`CassetteMiss`): the agent's instructions differ from the recorded ones,
a call has no recorded result (a renamed tool, other arguments), or a tool answered otherwise
than it did, so the recorded model turn that followed no longer holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from ackloop.domain.errors import ModelPermanentError
from ackloop.domain.wire import FunctionCall, Usage
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.tools.base import ToolContext, ToolOutcome

PathOf = Callable[[str], Awaitable[str]]
"""A run id of the replay -> where that run sits in its tree (``""``: the case's own run)."""


class RecordedTurn(BaseModel):
    """One model step as recorded."""

    step: str
    text: str | None = None
    calls: list[FunctionCall] = Field(default_factory=list)
    usage: Usage = Usage()
    finish_reason: str | None = None
    model_version: str | None = None


class RecordedCall(BaseModel):
    """One tool step as recorded."""

    step: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    response: dict[str, Any] = Field(default_factory=dict)
    is_error: bool = False
    final: bool = False
    decision: dict[str, Any] | None = None
    """How the call's wait ended (an approval's decision, an event's arrival), if it waited."""


class RecordedRun(BaseModel):
    """One run of the recorded tree."""

    run_id: str
    agent: str
    instructions_sha256: str | None = None
    """The agent's instructions when captured (None: not known where it was captured)."""
    turns: list[RecordedTurn] = Field(default_factory=list)
    calls: list[RecordedCall] = Field(default_factory=list)

    def turn(self, step: str) -> RecordedTurn | None:
        return next((t for t in self.turns if t.step == step), None)

    def call(self, step: str) -> RecordedCall | None:
        return next((c for c in self.calls if c.step == step), None)


class Cassette(BaseModel):
    """A recorded run and the runs below it, by where each sits in the tree (``""``: the
    run itself; a child run: the key of the step that started it, below its parent's)."""

    run_id: str
    runs: dict[str, RecordedRun]

    def model_calls(self) -> int:
        return sum(len(r.turns) for r in self.runs.values())


class CassetteMiss(ModelPermanentError):
    """The recording has no answer for this step: the replay left the recorded run here."""


def instructions_digest(instructions: str) -> str:
    return hashlib.sha256(instructions.encode()).hexdigest()


def capture(view: dict[str, Any], instructions: Callable[[str], str | None] | None = None
            ) -> Cassette:
    """The cassette of a run from its view tree (:mod:`ackloop.evals.facts`).
    ``instructions``: an agent's name -> its instructions now, to notice a change on replay."""
    runs: dict[str, RecordedRun] = {}
    _record(view, "", runs, instructions or (lambda _: None))
    return Cassette(run_id=str(view["run_id"]), runs=runs)


def _record(view: dict[str, Any], where: str, runs: dict[str, RecordedRun],
            instructions: Callable[[str], str | None]) -> None:
    steps = sorted(view.get("steps") or [], key=lambda s: s["key"])
    said = instructions(view["agent"])
    run = RecordedRun(run_id=view["run_id"], agent=view["agent"],
                      instructions_sha256=None if said is None else instructions_digest(said))
    asked: dict[int, list[dict[str, Any]]] = {}
    for step in steps:
        result = step.get("result") or {}
        if step["kind"] == "model" and step["status"] == "completed":
            calls = [FunctionCall.model_validate(c) for c in result.get("calls") or []]
            asked[step["turn"]] = [c.model_dump() for c in calls]
            run.turns.append(RecordedTurn(
                step=step["key"], text=result.get("text"), calls=calls,
                usage=Usage.model_validate({k: v for k, v in (step.get("usage") or {}).items()
                                            if k != "children"}),
                finish_reason=result.get("finish_reason"),
                model_version=result.get("model_version")))
        elif step["kind"] == "tool" and step["status"] == "completed":
            wanted = asked.get(step["turn"], [])
            call = wanted[step["index"]] if step["index"] < len(wanted) else {}
            run.calls.append(RecordedCall(
                step=step["key"], name=step["name"], args=dict(call.get("args") or {}),
                response=dict(result.get("response") or {}),
                is_error=bool(result.get("is_error")), final=bool(result.get("final")),
                decision=step.get("decision")))
    runs[where] = run
    for key, child in (view.get("child_views") or {}).items():
        _record(child, f"{where}/{key}" if where else key, runs, instructions)


def _turn_of(recorded: RecordedTurn) -> ModelTurn:
    from google.genai import types

    parts = []
    if recorded.text:
        parts.append(types.Part(text=recorded.text).model_dump(mode="json", exclude_none=True))
    for call in recorded.calls:
        part = types.Part(function_call=types.FunctionCall(name=call.name, args=dict(call.args),
                                                           id=call.id))
        parts.append(part.model_dump(mode="json", exclude_none=True))
    return ModelTurn(parts=parts, calls=list(recorded.calls), text=recorded.text,
                     usage=recorded.usage, finish_reason=recorded.finish_reason,
                     model_version=recorded.model_version)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                     default=str)


class CassetteModel:
    """A model client that answers each model step with the turn the recording has for it.

    ``path_of`` tells where a run of the replay sits in its tree; ``instructions`` gives an
    agent's instructions now. A step the recording cannot answer raises :class:`CassetteMiss`
    (a permanent model error: the run fails, with the reason, at the step where the replay
    left the recording)."""

    provider = "cassette"

    def __init__(self, cassette: Cassette, path_of: PathOf,
                 instructions: Callable[[str], str | None],
                 diverged: dict[str, str] | None = None) -> None:
        self.cassette = cassette
        self.path_of = path_of
        self.instructions = instructions
        self.diverged = diverged if diverged is not None else {}
        """Where a tool's call left the recording (run path -> why), shared with the tools."""
        self.turns_played = 0

    async def generate(self, request: ModelRequest) -> ModelTurn:
        from ackloop.telemetry.context import current_labels

        labels = current_labels()
        run_id, step = labels.get("run_id", ""), labels.get("step", "")
        where = await self.path_of(run_id)
        recorded = self.cassette.runs.get(where)
        place = f"step {step}" + (f" of the child run at {where}" if where else "")
        if recorded is None:
            raise CassetteMiss(f"replay: the recording has no run at {where or 'the top'}")
        if where in self.diverged:
            raise CassetteMiss(f"replay left the recording at {place}: "
                               f"{self.diverged[where]}; the recorded model turn no longer "
                               "holds")
        said = self.instructions(recorded.agent)
        if (recorded.instructions_sha256 is not None and said is not None
                and instructions_digest(said) != recorded.instructions_sha256):
            raise CassetteMiss(f"replay left the recording at {place}: agent "
                               f"{recorded.agent!r}'s instructions changed since it was "
                               "recorded, so its recorded answers no longer hold")
        turn = recorded.turn(step)
        if turn is None:
            raise CassetteMiss(f"replay left the recording at {place}: the recorded run "
                               f"made no such model step ({len(recorded.turns)} recorded)")
        self.turns_played += 1
        return _turn_of(turn)


class CassetteToolbox:
    """An agent's tools as declared, answering each call with its recorded result.

    The engine still reads the real tools' metadata (a sub-agent's call starts a child run, a
    hand-off hands over, an approval waits); only ``execute`` is replaced. A call the
    recording does not have at that step (another tool, other arguments) answers an error
    that says what was recorded there; the model step after it then stops the replay."""

    def __init__(self, inner: Any, cassette: Cassette, path_of: PathOf,
                 diverged: dict[str, str]) -> None:
        self.inner = inner
        self.cassette = cassette
        self.path_of = path_of
        self.diverged = diverged
        self.executed = 0

    def declarations(self) -> list[dict[str, Any]]:
        declared: list[dict[str, Any]] = self.inner.declarations()
        return declared

    def __getattr__(self, name: str) -> Any:  # get, parts, is_retry_safe, prepare...
        return getattr(self.inner, name)

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        where = await self.path_of(context.run_id)
        run = self.cassette.runs.get(where)
        recorded = run.call(context.step_key) if run is not None else None
        made = f"{call.name}({json.dumps(call.args, sort_keys=True)})"
        why = None
        if not any(d.get("name") == call.name for d in self.declarations()):
            why = f"the agent has no tool {call.name!r} now (step {context.step_key})"
        elif recorded is None or recorded.name != call.name or not _same(recorded.args,
                                                                          call.args):
            said = (f"{recorded.name}({json.dumps(recorded.args, sort_keys=True)})"
                    if recorded is not None else "no call")
            why = f"the recording has {said} at step {context.step_key}, not {made}"
        if why is not None or recorded is None:
            why = why or f"the recording has no call at step {context.step_key}"
            self.diverged.setdefault(where, why)
            return ToolOutcome(response={"error": f"replay: {why}"}, is_error=True)
        self.executed += 1
        return ToolOutcome(response=recorded.response, is_error=recorded.is_error,
                           final=recorded.final)
