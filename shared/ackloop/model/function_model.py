"""Scripts a user writes for their own agent: a function of the conversation, or a list of turns.

A script plays the model offline (the local stack without Gemini credentials, and tests). It sees
a small public view of the request (:class:`Conversation`) and answers with :func:`text`,
:func:`call` or :func:`calls`. Like every scripted model it must decide from what it is shown
alone: a redelivered step, possibly in another process, must get the same turn again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ackloop.domain.errors import ModelPermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.final_answer_script import FINAL_ANSWER
from ackloop.model.transcript import ToolResult, read_exchange
from ackloop.model.turns import calls_turn, text_turn


@dataclass(frozen=True)
class Reply:
    """One model turn a script gives: a text answer, or one or more tool calls."""

    text: str | None = None
    calls: tuple[tuple[str, JsonDict], ...] = ()

    def to_turn(self, request: ModelRequest) -> ModelTurn:
        """The :class:`ModelTurn` the engine reads, with usage estimated from ``request``."""
        if self.calls:
            return calls_turn(list(self.calls), request=request)
        return text_turn(self.text or "", request=request)


def text(answer: str) -> Reply:
    """A final answer in text."""
    if not isinstance(answer, str):
        raise TypeError(f"text() takes a string, got {type(answer).__name__}")
    return Reply(text=answer)


def call(tool: str, args: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Reply:
    """A turn calling ``tool`` with ``args`` (a dict, or keyword arguments)."""
    if not isinstance(tool, str) or not tool:
        raise TypeError("call() takes the tool's name first")
    return Reply(calls=((tool, {**(args or {}), **kwargs}),))


def calls(*replies: Reply) -> Reply:
    """One turn with several calls, run in parallel: ``calls(call("a"), call("b", x=1))``."""
    if not replies or any(not r.calls for r in replies):
        raise ValueError("calls() takes one or more call(...) turns")
    return Reply(calls=tuple(c for r in replies for c in r.calls))


@dataclass(frozen=True)
class Conversation:
    """What a script sees of one model request: this run's question and what happened since."""

    question: str
    """The user's question of the current run."""
    results: tuple[ToolResult, ...] = ()
    """Tool results of this run, oldest first (``.name``, ``.result``, ``.error``)."""
    tools: tuple[str, ...] = ()
    """Names of the tools offered to the model."""
    turn: int = 0
    """How many model turns this run already took (0 on the first call)."""
    agent: str | None = None
    """The agent being played (None when only the REST body was seen)."""
    instructions: str = ""
    declarations: tuple[JsonDict, ...] = field(default=(), repr=False)
    """The tools' function declarations (name, description, parameters)."""

    @classmethod
    def of(cls, request: ModelRequest) -> Conversation:
        exchange = read_exchange(request.contents)
        offered = tuple(d for d in request.tools if d.get("name") != FINAL_ANSWER)
        return cls(
            question=exchange.question,
            results=tuple(exchange.results),
            tools=tuple(str(d.get("name")) for d in offered),
            turn=len(exchange.model_contents),
            agent=request.agent,
            instructions=request.system_instruction,
            declarations=offered,
        )

    def result(self, tool: str) -> Any:
        """The latest result of ``tool`` in this run (None when it was not called or failed)."""
        for found in reversed(self.results):
            if found.name == tool:
                return None if found.error is not None else found.result
        return None

    def called(self, tool: str) -> bool:
        """Whether ``tool`` already answered in this run."""
        return any(r.name == tool for r in self.results)


ScriptFunction = Callable[[Conversation], Reply | str]


class FunctionModel:
    """A script that is a function of the conversation: ``fn(conversation) -> Reply | str``.

    A string is a text answer. ``fn`` must decide from the conversation alone (no counters):
    each model step may run in another process, and a redelivered step must get the same turn.
    """

    def __init__(self, fn: ScriptFunction) -> None:
        if not callable(fn):
            raise TypeError("FunctionModel takes a function of the conversation")
        self.fn = fn

    def __call__(self, request: ModelRequest) -> ModelTurn:
        return _as_reply(self.fn(Conversation.of(request)), self.fn).to_turn(request)


class ScriptedTurns:
    """A script that is a list of turns: the n-th model turn of each run gets ``turns[n]``.

    A string is a text answer. A run that asks for more turns than the list holds fails with
    ``model_script_exhausted``.
    """

    def __init__(self, turns: Iterable[Reply | str]) -> None:
        self.turns: Sequence[Reply] = [Reply(text=t) if isinstance(t, str) else t for t in turns]
        if any(not isinstance(t, Reply) for t in self.turns):
            raise TypeError("ScriptedTurns takes text(...), call(...), calls(...) or strings")
        if not self.turns:
            raise ValueError("ScriptedTurns needs at least one turn")

    def __call__(self, request: ModelRequest) -> ModelTurn:
        index = len(read_exchange(request.contents).model_contents)
        if index >= len(self.turns):
            raise ModelPermanentError(
                f"the script has {len(self.turns)} turns; the run asked for turn {index + 1}",
                reason="model_script_exhausted",
            )
        return self.turns[index].to_turn(request)


def _as_reply(value: object, source: object) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    raise ModelPermanentError(
        f"{getattr(source, '__name__', source)} gave {type(value).__name__}; a script answers "
        "with text(...), call(...), calls(...) or a string",
        reason="model_script_invalid",
    )
