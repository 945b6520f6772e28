"""The scripted model: a deterministic, offline :class:`ModelClient` (provider ``"scripted"``).

By default it plays the seed agent (:func:`ackloop.model.seed_agent.seed_agent_turn`). Tests pass
their own script, or a fixed list of turns. Scripts must be stateless functions of the request so
that a redelivered step, possibly in another process, gets the same turn again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ackloop.domain.context_window import is_summary_request
from ackloop.domain.errors import ModelPermanentError
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.seed_agent import seed_agent_turn
from ackloop.model.transcript import Exchange, count_model_contents, read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.model.validated import validated

REFERENCE_ANSWER = "Reference workload done."

Script = Callable[[ModelRequest], ModelTurn]
"""Decides one turn from one request. May raise ``ModelRetryableError``/``ModelPermanentError``."""


class ScriptedModel:
    """A :class:`ModelClient` whose turns come from a script instead of a network call.

    Requests are validated like Gemini validates them (contents must parse as ``Content``).
    :attr:`calls` counts :meth:`generate` calls and :attr:`requests` keeps the last
    ``keep_requests`` of them, so tests can inspect them and a long benchmark stays bounded.
    """

    provider = "scripted"

    def __init__(self, script: Script | None = None, *, keep_requests: int = 1000) -> None:
        self.script: Script = script or seed_agent_turn
        self.calls = 0
        self.requests: deque[ModelRequest] = deque(maxlen=keep_requests)

    @classmethod
    def from_turns(cls, turns: Sequence[ModelTurn]) -> ScriptedModel:
        """Answer with ``turns[n]``, where n is how many model turns the contents already hold.

        Counting from the contents (not calls) keeps it stateless: a redelivered step gets the
        same turn. Running past the end raises ``ModelPermanentError`` with reason
        ``model_script_exhausted``.
        """
        fixed = list(turns)

        def script(request: ModelRequest) -> ModelTurn:
            index = count_model_contents(request.contents)
            if index >= len(fixed):
                raise ModelPermanentError(
                    f"scripted model has {len(fixed)} turns, asked for turn {index + 1}",
                    reason="model_script_exhausted",
                )
            return fixed[index]

        return cls(script)

    async def generate(self, request: ModelRequest) -> ModelTurn:
        """Validate ``request`` and return the script's turn for it."""
        self.calls += 1
        self.requests.append(request)
        return self.decide(request)

    def decide(self, request: ModelRequest) -> ModelTurn:
        """Like :meth:`generate`, but synchronous and unrecorded (the fake server's hook).
        A compaction's request (:func:`ackloop.domain.context_window.is_summary_request`) is
        answered with :func:`scripted_summary`, whatever the script."""
        validate_contents(request)
        if is_summary_request(request.contents):
            return text_turn(scripted_summary(request.contents), request=request)
        return self.script(request)


SUMMARY_CHARS = 600
"""The most a scripted summary says."""


def scripted_summary(contents: Sequence[Any]) -> str:
    """A deterministic summary of a compaction's request, of bounded size: how many model
    turns it covers, the user's last three texts and how often each tool was called (what a
    test can check)."""
    texts: list[str] = []
    tools: dict[str, int] = {}
    turns = 0
    for content in contents[:-1]:
        if content.get("role") == "model":
            turns += 1
        for part in content.get("parts") or []:
            text = part.get("text")
            if content.get("role") == "user" and isinstance(text, str) and text.strip():
                texts.append(text.strip().splitlines()[-1][:120])
            call = part.get("function_call")
            if isinstance(call, dict):
                tools[str(call.get("name"))] = tools.get(str(call.get("name")), 0) + 1
    lines = [f"{turns} model turn(s) summarized.",
             f"The user said, last: {' | '.join(texts[-3:])}" if texts else "",
             "Tools called: " + ", ".join(f"{n} x{c}" for n, c in sorted(tools.items()))
             if tools else ""]
    return "\n".join(line for line in lines if line)[:SUMMARY_CHARS]


def validate_contents(request: ModelRequest) -> None:
    """Reject what Gemini would reject with a 400: unparseable contents or unknown roles."""
    from google.genai import types  # imported by a model step only (see ackloop.model.turns)

    try:
        roles = [_valid_role(content, types.Content) for content in request.contents]
        for declaration in request.tools:
            _valid_role(declaration, types.FunctionDeclaration)
    except ValidationError as error:
        raise ModelPermanentError(
            f"invalid request: {error}", reason="model_invalid_request"
        ) from error
    if not roles:
        raise ModelPermanentError("contents must not be empty", reason="model_invalid_request")
    for role in roles:
        if role not in ("user", "model"):
            raise ModelPermanentError(
                f"content role must be 'user' or 'model', got {role!r}",
                reason="model_invalid_request",
            )


def _valid_role(value: Any, model: Any) -> str | None:
    """``value`` validated as ``model`` (raises ValidationError; once per distinct value per
    process: :mod:`ackloop.model.validated`), its ``role`` if it has one."""
    return getattr(validated(model, value), "role", None)


def reference_workload_script(
    tool_name: str,
    args: Mapping[str, Any] | None = None,
    *,
    calls: int = 2,
    answer: str = REFERENCE_ANSWER,
) -> Script:
    """model -> tool -> model -> tool -> model: call ``tool_name`` ``calls`` times, then answer.

    The decision is the number of function responses after the question, so it is stateless and
    works across processes. With the default ``calls=2`` a run takes 3 model turns and 2 tool calls.
    """
    call_args = dict(args or {})

    def script(request: ModelRequest) -> ModelTurn:
        return reference_turn(request, read_exchange(request.contents), tool_name, call_args,
                              calls=calls, answer=answer)

    return script


def reference_turn(request: ModelRequest, exchange: Exchange, tool_name: str,
                   args: Mapping[str, Any], *, calls: int, answer: str = REFERENCE_ANSWER
                   ) -> ModelTurn:
    """The reference workload's turn, from the request's exchange as already read (a script
    that read it for something else does not read the whole history twice)."""
    if len(exchange.results) < calls:
        return calls_turn([(tool_name, dict(args))], request=request)
    return text_turn(answer, request=request)
