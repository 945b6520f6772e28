"""What a tool is, and the three ways to make one: ``@tool``, ``typed_tool`` and ``text_tool``.

A handler is an async function that receives its validated Pydantic arguments and, when it asks
for one, the :class:`~ackloop.tools.base.ToolContext`. It returns a string, anything JSON-able
(a Pydantic model is dumped in JSON mode) or a :class:`~ackloop.tools.errors.FinalResult`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, create_model

from ackloop.tools.base import JsonDict, ToolContext
from ackloop.tools.schema import parameters_schema

Handler = Callable[..., Awaitable[Any]]
BoundCall = Callable[[BaseModel, ToolContext], Awaitable[Any]]

DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024
# Gemini function names: a letter or underscore first, then letters, digits, _ . : -
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")
_DOC_SECTION_RE = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields):\s*$", re.M)


class NoArguments(BaseModel):
    """Arguments of a tool that takes none. Anything the model sends anyway is ignored."""

    model_config = ConfigDict(extra="ignore")


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
) -> Callable[[Handler], Tool]: ...


def tool(
    name: str | Handler | None = None,
    description: str | None = None,
    *,
    retry_safe: bool = True,
    timeout_seconds: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> Tool | Callable[[Handler], Tool]:
    """Make a tool of an async function; use bare (``@tool``) or called (``@tool("name")``).

    The arguments model is the annotation of the parameter typed as a Pydantic model (none: the
    tool takes no arguments); a parameter typed :class:`ToolContext` or named ``context`` receives
    the context. The name defaults to the function's name, the description to its docstring (up
    to an ``Args:``/``Returns:`` section, which the schema already covers).
    """

    def build(fn: Handler) -> Tool:
        model, arg_name, call = _adapt_annotated(fn)
        return Tool(
            name=name if isinstance(name, str) else fn.__name__,
            description=description if description is not None else _describe(fn),
            args_model=model,
            call=call,
            arg_name=arg_name,
            retry_safe=retry_safe,
            timeout_seconds=timeout_seconds,
            max_output_bytes=max_output_bytes,
        )

    if callable(name):
        return build(name)
    return build


def typed_tool(
    name: str,
    description: str,
    args_model: type[BaseModel],
    handler: Handler,
    *,
    retry_safe: bool = True,
    timeout_seconds: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> Tool:
    """Make a tool of any async callable (a bound method, say) with an explicit arguments model.

    ``handler`` is called as ``handler(args)`` or ``handler(args, context)`` depending on how many
    parameters it takes; a handler with no parameters is called without arguments.
    """
    _require_async(handler)
    params = list(inspect.signature(handler).parameters.values())
    arg_name = params[0].name if params else None

    async def call(args: BaseModel, context: ToolContext) -> Any:
        if not params:
            return await handler()
        if len(params) == 1:
            return await handler(args)
        return await handler(args, context)

    return Tool(
        name=name,
        description=description,
        args_model=args_model,
        call=call,
        arg_name=arg_name,
        retry_safe=retry_safe,
        timeout_seconds=timeout_seconds,
        max_output_bytes=max_output_bytes,
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
) -> Tool:
    """Make a tool whose only argument is one string, passed to ``handler(text[, context])``."""
    _require_async(handler)
    model_name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]", name)) + "Args"
    fields: dict[str, Any] = {argument: (str, Field(description=argument_description))}
    args_model: type[BaseModel] = create_model(model_name, **fields)
    takes_context = len(inspect.signature(handler).parameters) >= 2

    async def call(args: BaseModel, context: ToolContext) -> Any:
        text = getattr(args, argument)
        return await (handler(text, context) if takes_context else handler(text))

    return Tool(
        name=name,
        description=description,
        args_model=args_model,
        call=call,
        arg_name=argument,
        retry_safe=retry_safe,
        timeout_seconds=timeout_seconds,
        max_output_bytes=max_output_bytes,
    )


def _adapt_annotated(fn: Handler) -> tuple[type[BaseModel], str | None, BoundCall]:
    """Read the arguments model and the context parameter from ``fn``'s annotations."""
    _require_async(fn)
    model: type[BaseModel] = NoArguments
    arg_name: str | None = None
    context_name: str | None = None
    for param in inspect.signature(fn, eval_str=True).parameters.values():
        annotation = param.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation is ToolContext:
                context_name = param.name
                continue
            if arg_name is not None:
                raise TypeError(f"{fn.__name__}: take ONE Pydantic arguments model")
            model, arg_name = annotation, param.name
        elif param.name == "context":
            context_name = param.name
        else:
            raise TypeError(
                f"{fn.__name__}: parameter {param.name!r} must be a Pydantic model (the "
                "arguments) or the ToolContext; put plain arguments in the model"
            )

    async def call(args: BaseModel, context: ToolContext) -> Any:
        kwargs: dict[str, Any] = {}
        if arg_name is not None:
            kwargs[arg_name] = args
        if context_name is not None:
            kwargs[context_name] = context
        return await fn(**kwargs)

    return model, arg_name, call


def _describe(fn: Handler) -> str:
    doc = inspect.getdoc(fn) or ""
    section = _DOC_SECTION_RE.search(doc)
    return (doc[: section.start()] if section else doc).strip()


def _require_async(fn: Handler) -> None:
    # An object with an async __call__ is as good as an async function.
    if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)):
        raise TypeError(f"tool handler {fn!r} must be an async function")
