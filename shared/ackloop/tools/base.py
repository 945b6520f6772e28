"""The tool port: how the engine runs one function call the model asked for."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.tools.files import NamedFile


class ToolContext(BaseModel):
    """What a tool call knows about where it runs.

    ``idempotency_key`` is stable across redeliveries of the same step: a tool with external side
    effects passes it on (as an ``Idempotency-Key`` header, say) so a re-run cannot act twice.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    step_key: str
    idempotency_key: str
    attempt: int = 1
    timeout_seconds: float = 30.0
    event: JsonDict | None = None
    """The payload of the event the call waited for (a tool with ``waits_for``), else None."""


class ToolOutcome(BaseModel):
    """The result of one call, as the model will read it.

    ``response`` becomes the ``function_response.response`` dict: ``{"result": ...}`` on success,
    ``{"error": "..."}`` on a failure written for the model. ``final`` ends the run with
    ``response["result"]`` as its output.
    """

    model_config = ConfigDict(frozen=True)

    response: JsonDict
    is_error: bool = False
    final: bool = False
    files: tuple[NamedFile, ...] = Field(default=(), exclude=True, repr=False)
    """Files the tool returned (:mod:`ackloop.tools.files`), referenced by name in
    ``response``: the tool step stores their bytes and records ``response["files"]``, what
    names them. Never dumped: bytes are not a result."""


class Toolbox(Protocol):
    """A set of tools an agent may call."""

    def declarations(self) -> list[JsonDict]:
        """Gemini ``FunctionDeclaration`` dicts (flat JSON schema, no ``$ref``)."""
        ...

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        """Run ``call``. Never raises for tool failures: they become an error outcome."""
        ...


async def prepare_toolbox(toolbox: Toolbox) -> None:
    """Await the toolbox's optional ``prepare()`` before the engine reads it.

    ``declarations()`` and ``is_retry_safe()`` are plain calls, but a toolbox whose tools live
    elsewhere (an MCP server's) must first ask for them over the network. Such a toolbox has an
    async ``prepare()``, which the engine awaits before a model step declares the tools and
    before a tool step runs one. It is cheap once done; a retryable error from it releases the
    step for redelivery, a permanent one is the step's failure.
    """
    prepare = getattr(toolbox, "prepare", None)
    if prepare is not None:
        await prepare()
