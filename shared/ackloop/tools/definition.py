"""What a tool is, and the three ways to make one: ``@tool``, ``typed_tool`` and ``text_tool``.

A handler is a function, async or sync, that receives its validated arguments (plain parameters
or one Pydantic model) and, when it asks for one, the :class:`~ackloop.tools.base.ToolContext`.
It returns a string, anything JSON-able (a Pydantic model is dumped in JSON mode) or a
:class:`~ackloop.tools.errors.FinalResult`.

A sync handler runs in a worker thread (:func:`asyncio.to_thread`): the step's event loop also
runs the lease heartbeat, which a blocking call on it would starve. A thread cannot be killed,
so a sync handler cut by its timeout keeps running in the background until it returns; the step
records the timeout all the same.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import inspect
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic import BaseModel, Field, create_model

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import is_identifier
from ackloop.tools.base import ToolContext
from ackloop.tools.docstrings import read_docstring
from ackloop.tools.parameters import read_parameters
from ackloop.tools.schema import parameters_schema

Handler = Callable[..., Any]
"""An async function, or a sync one (run in a worker thread)."""
AsyncHandler = Callable[..., Awaitable[Any]]
ApprovalPolicy = Callable[[dict[str, Any]], bool]
"""Whether a call needs a person's approval, from its arguments as the model sent them."""
EventName = Callable[[dict[str, Any]], str]
"""The name of the event a call waits for, from its arguments as the model sent them."""
SleepLength = Callable[[dict[str, Any]], "float | dt.datetime | None"]
"""How long a call sleeps before it runs, from its arguments as the model sent them: seconds,
an aware datetime to sleep until, or None (it does not sleep)."""
BoundCall = Callable[[BaseModel, ToolContext], Awaitable[Any]]

DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024
EVENT_NAME_HINT = ("an event's name has 1 to 128 characters, letters, digits and '_.:@-', "
                   "and starts with a letter or digit")
# Gemini function names: a letter or underscore first, then letters, digits, _ . : -
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")


@dataclass(frozen=True)
class SubAgent:
    """What makes a tool a sub-agent's (``Agent.as_tool``): its call is a child run of
    ``agent`` (:mod:`ackloop.engine.children`), with these budgets at most (None: the agent's,
    else the deployment's; never more than the calling run has left)."""

    agent: str
    max_steps: int | None = None
    max_seconds: float | None = None
    max_tool_calls: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Tool:
    """One tool: its declaration for the model and how to run it.

    ``retry_safe`` tells the engine whether running the tool again after a crash is harmless
    (true for read-only tools). A tool with side effects sets it to False and, if it can, passes
    ``context.idempotency_key`` on so that a re-run cannot act twice.
    """

    name: str
    description: str
    args_model: type[BaseModel]
    call: BoundCall
    """Runs the handler with validated arguments and the context."""
    arg_name: str | None = None
    """The handler's parameter name: Gemini may nest the arguments under it."""
    retry_safe: bool = True
    timeout_seconds: float | None = None
    """Cap on one call; the context's ``timeout_seconds`` caps it further. None: the context's."""
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    """Cap on the JSON size of the response the model reads; longer output is truncated."""
    requires_approval: bool | ApprovalPolicy = False
    """True, or a policy of the call's arguments: such a call waits for a person's decision
    (``POST /runs/{id}/approvals/{step}``) before it runs."""
    approval_timeout_seconds: float | None = None
    """How long a call waits for a decision before it is rejected; None: the run's option,
    else the deployment's ``approval_timeout_seconds``."""
    waits_for: str | EventName | None = None
    """An event's name, or a function of the call's arguments naming it: such a call waits
    until the run receives that event (``POST /runs/{id}/events/{name}``, or the queries
    topic), then runs with its payload in ``context.event``. Each name is received once per
    run, so a tool that waits per item names the event from its arguments."""
    event_timeout_seconds: float | None = None
    """How long a call waits for its event before it fails for the model ("no event before
    the deadline"); None: the run's ``approval_timeout_seconds``, else the deployment's."""
    sleeps: float | SleepLength | None = None
    """Seconds, or a function of the call's arguments giving seconds or an aware datetime:
    such a call sleeps that long before it runs (no process runs and nothing is delivered
    meanwhile; :mod:`ackloop.engine.waits`)."""
    concurrency: tuple[str, int] | None = None
    """``(key, limit)``: at most ``limit`` calls of the tools declaring ``key`` run at once,
    across every run; a call that finds none free waits, acknowledged
    (:mod:`ackloop.engine.concurrency`). An API with a rate limit of its own."""
    sub_agent: SubAgent | None = None
    """Set by ``Agent.as_tool``: a call starts a child run of that agent and waits for its end
    (the engine runs it; ``call`` is not used)."""
    handoff: str | None = None
    """Set by ``Agent.as_handoff``: a call hands the conversation to that agent, whose
    instructions and tools the run's next turns (and the conversation's later runs) use (the
    engine runs it; ``call`` is not used)."""
    target: object = field(default=None, compare=False, repr=False)
    """The :class:`~ackloop.agents.agent.Agent` a sub-agent's call or a hand-off reaches (set
    by ``as_tool`` and ``as_handoff``), so that a tester can register it with its caller."""

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} must start with a letter or '_' and use only letters, "
                "digits, '_', '.', ':' or '-' (64 characters at most)"
            )
        if not self.description.strip():
            raise ValueError(f"tool {self.name!r} needs a description: the model chooses by it")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        if self.max_output_bytes < 256:
            raise ValueError("max_output_bytes must be at least 256")
        if self.approval_timeout_seconds is not None and self.approval_timeout_seconds <= 0:
            raise ValueError("approval_timeout_seconds must be positive")
        if self.event_timeout_seconds is not None and self.event_timeout_seconds <= 0:
            raise ValueError("event_timeout_seconds must be positive")
        if self.waits_for is not None and self.requires_approval is not False:
            raise ValueError(f"tool {self.name!r} waits for an event and an approval: choose "
                             "one (an approval is the wait for a person's decision)")
        if isinstance(self.waits_for, str) and not is_identifier(self.waits_for):
            raise ValueError(f"event name {self.waits_for!r}: {EVENT_NAME_HINT}")
        if self.sleeps is not None and (self.waits_for is not None
                                        or self.requires_approval is not False):
            raise ValueError(f"tool {self.name!r} sleeps and waits for an event or an "
                             "approval: choose one")
        if isinstance(self.sleeps, (int, float)) and not self.sleeps > 0:
            raise ValueError("sleeps must be a positive number of seconds")

    def sleep_seconds(self, args: dict[str, Any], now: float) -> float | None:
        """How long a call with ``args`` sleeps from ``now`` (None: it does not sleep; 0: its
        time has passed, it runs at once).

        Raises :class:`ValueError` when the length function fails or gives something else
        than seconds or an aware datetime: the call then fails for the model."""
        if self.sleeps is None:
            return None
        length: object = self.sleeps
        if callable(length):
            try:
                length = length(args)
            except Exception as exc:
                raise ValueError(f"could not tell how long this call sleeps: {exc}") from exc
        if length is None:
            return None
        if isinstance(length, dt.datetime):
            if length.tzinfo is None:
                raise ValueError(f"sleeps until {length.isoformat()}: give a time zone")
            return max(0.0, length.timestamp() - now)
        if isinstance(length, bool) or not isinstance(length, (int, float)) or not (
                math.isfinite(length)):
            raise ValueError(f"sleeps {length!r}: give seconds or an aware datetime")
        return max(0.0, float(length))

    def needs_approval(self, args: dict[str, Any]) -> bool:
        """Whether a call with ``args`` waits for a decision. A policy that raises is taken
        as a yes: a person looks at a call the policy could not judge."""
        if callable(self.requires_approval):
            try:
                return bool(self.requires_approval(args))
            except Exception:
                return True
        return self.requires_approval

    def awaited_event(self, args: dict[str, Any]) -> str | None:
        """The name of the event a call with ``args`` waits for, or None.

        Raises :class:`ValueError` when the naming function fails or names no valid event:
        the call then fails for the model instead of waiting for an event nobody can send."""
        if self.waits_for is None:
            return None
        if isinstance(self.waits_for, str):
            return self.waits_for
        try:
            name = self.waits_for(args)
        except Exception as exc:
            raise ValueError(f"could not name the event this call waits for: {exc}") from exc
        if not isinstance(name, str) or not is_identifier(name):
            raise ValueError(f"the event this call waits for is named {name!r}: "
                             f"{EVENT_NAME_HINT}")
        return name

    def declaration(self) -> JsonDict:
        """The Gemini ``FunctionDeclaration`` dict: name, description and flat parameters."""
        declaration: JsonDict = {"name": self.name, "description": self.description}
        parameters = parameters_schema(self.args_model)
        if parameters is not None:
            declaration["parameters"] = parameters
        return declaration


@overload
def tool(fn: Handler, /) -> Tool: ...


@overload
def tool(
    name: str | None = None,
    description: str | None = None,
    *,
    retry_safe: bool = True,
    timeout_seconds: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    requires_approval: bool | ApprovalPolicy = False,
    approval_timeout_seconds: float | None = None,
    waits_for: str | EventName | None = None,
    event_timeout_seconds: float | None = None,
    sleeps: float | SleepLength | None = None,
    concurrency: tuple[str, int] | None = None,
) -> Callable[[Handler], Tool]: ...


def tool(
    name: str | Handler | None = None,
    description: str | None = None,
    *,
    retry_safe: bool = True,
    timeout_seconds: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    requires_approval: bool | ApprovalPolicy = False,
    approval_timeout_seconds: float | None = None,
    waits_for: str | EventName | None = None,
    event_timeout_seconds: float | None = None,
    sleeps: float | SleepLength | None = None,
    concurrency: tuple[str, int] | None = None,
) -> Tool | Callable[[Handler], Tool]:
    """Make a tool of a function, async or sync; use bare (``@tool``) or called (``@tool("name")``).

    The function declares its arguments either as plain annotated parameters
    (``city: str, days: Annotated[int, Field(ge=1)] = 1``), which become the fields of the
    arguments model, or as ONE parameter annotated with a Pydantic model, which is the whole
    arguments model. A parameter annotated :class:`ToolContext`, or named ``context``, receives
    the context. The name defaults to the function's name; the description to its docstring up
    to the first section, and each plain parameter's description to its entry in the ``Args:``
    section (or ``:param name:``), unless ``Annotated[T, "text"]`` or ``Field`` gives one.
    ``requires_approval`` (True, or a function of the call's arguments) makes a call wait for
    a person's decision, at most ``approval_timeout_seconds``; ``waits_for`` (an event's name,
    or a function of the call's arguments) makes it wait for that event, at most
    ``event_timeout_seconds``, and run with its payload in ``context.event``; ``sleeps``
    (seconds, or a function of the call's arguments giving seconds or an aware datetime) makes
    it sleep that long first, at no cost while it sleeps; ``concurrency`` (a key and a limit)
    lets at most that many calls of the tools naming the key run at once, across every run.
    """

    def build(fn: Handler) -> Tool:
        docs = read_docstring(fn)
        parameters = read_parameters(fn, docs.parameters)
        run = _as_async(fn)

        async def call(args: BaseModel, context: ToolContext) -> Any:
            return await run(**parameters.keywords(args, context))

        return Tool(
            name=name if isinstance(name, str) else fn.__name__,
            description=description if description is not None else docs.summary,
            args_model=parameters.model,
            call=call,
            arg_name=parameters.model_parameter,
            retry_safe=retry_safe,
            timeout_seconds=timeout_seconds,
            max_output_bytes=max_output_bytes,
            requires_approval=requires_approval,
            approval_timeout_seconds=approval_timeout_seconds,
            waits_for=waits_for,
            event_timeout_seconds=event_timeout_seconds,
            sleeps=sleeps,
            concurrency=_concurrency(concurrency),
        )

    if callable(name):
        return build(name)
    return build


def _concurrency(declared: tuple[str, int] | None) -> tuple[str, int] | None:
    """A tool's concurrency limit, checked: a key and at least one call."""
    if declared is None:
        return None
    key, limit = declared
    if not key or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"concurrency={declared!r}: give a key and a limit of at least 1, "
                         "like ('an-api', 3)")
    return key, limit


def typed_tool(
    name: str,
    description: str,
    args_model: type[BaseModel],
    handler: Handler,
    *,
    retry_safe: bool = True,
    timeout_seconds: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    requires_approval: bool | ApprovalPolicy = False,
    approval_timeout_seconds: float | None = None,
    waits_for: str | EventName | None = None,
    event_timeout_seconds: float | None = None,
    sleeps: float | SleepLength | None = None,
) -> Tool:
    """Make a tool of any callable (a bound method, say), async or sync, with an explicit
    arguments model.

    ``handler`` is called as ``handler(args)`` or ``handler(args, context)`` depending on how many
    parameters it takes; a handler with no parameters is called without arguments.
    """
    run = _as_async(handler)
    params = list(inspect.signature(handler).parameters.values())
    arg_name = params[0].name if params else None

    async def call(args: BaseModel, context: ToolContext) -> Any:
        if not params:
            return await run()
        if len(params) == 1:
            return await run(args)
        return await run(args, context)

    return Tool(
        name=name,
        description=description,
        args_model=args_model,
        call=call,
        arg_name=arg_name,
        retry_safe=retry_safe,
        timeout_seconds=timeout_seconds,
        max_output_bytes=max_output_bytes,
        requires_approval=requires_approval,
        approval_timeout_seconds=approval_timeout_seconds,
        waits_for=waits_for,
        event_timeout_seconds=event_timeout_seconds,
        sleeps=sleeps,
    )


def text_tool(
    name: str,
    description: str,
    handler: Handler,
    *,
    argument: str = "text",
    argument_description: str = "The input text.",
    retry_safe: bool = True,
    timeout_seconds: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    requires_approval: bool | ApprovalPolicy = False,
    approval_timeout_seconds: float | None = None,
    waits_for: str | EventName | None = None,
    event_timeout_seconds: float | None = None,
    sleeps: float | SleepLength | None = None,
) -> Tool:
    """Make a tool whose only argument is one string, passed to ``handler(text[, context])``
    (async or sync)."""
    run = _as_async(handler)
    model_name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]", name)) + "Args"
    fields: dict[str, Any] = {argument: (str, Field(description=argument_description))}
    args_model: type[BaseModel] = create_model(model_name, **fields)
    takes_context = len(inspect.signature(handler).parameters) >= 2

    async def call(args: BaseModel, context: ToolContext) -> Any:
        text = getattr(args, argument)
        return await (run(text, context) if takes_context else run(text))

    return Tool(
        name=name,
        description=description,
        args_model=args_model,
        call=call,
        arg_name=argument,
        retry_safe=retry_safe,
        timeout_seconds=timeout_seconds,
        max_output_bytes=max_output_bytes,
        requires_approval=requires_approval,
        approval_timeout_seconds=approval_timeout_seconds,
        waits_for=waits_for,
        event_timeout_seconds=event_timeout_seconds,
        sleeps=sleeps,
    )


def _as_async(fn: Handler) -> AsyncHandler:
    """``fn`` itself when it is async; otherwise ``fn`` run in a worker thread, off the loop."""
    if not callable(fn):
        raise TypeError(f"tool handler {fn!r} is not callable")
    # An object with an async __call__ is as good as an async function.
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        return fn

    @functools.wraps(fn)
    async def in_thread(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return in_thread


def find_tool(toolbox: object, name: str) -> Tool | None:
    """The :class:`Tool` called ``name`` in a toolset or a combination of toolboxes."""
    get = getattr(toolbox, "get", None)
    if callable(get):
        found = get(name)
        return found if isinstance(found, Tool) else None
    for part in getattr(toolbox, "parts", ()):
        if (found := find_tool(part, name)) is not None:
            return found
    return None
