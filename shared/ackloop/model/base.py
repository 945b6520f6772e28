"""The model port: what the engine needs from a model, and nothing about how it is reached.

Contents, parts and function declarations travel as the JSON dicts google-genai produces with
``model_dump(mode="json", exclude_none=True)``. That is also how they are stored in Firestore, so
a model's raw parts (thought signatures included) go back to it unchanged on the next step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ackloop.domain.jsondict import JsonDict, SharedJsonDict
from ackloop.domain.wire import FunctionCall, Usage


class ModelRequest(BaseModel):
    """One model call: everything the model sees."""

    model_config = ConfigDict(frozen=True)

    model: str
    system_instruction: str
    agent: str | None = None
    """The agent the call is for (set by the model step): a scripted model plays that agent's
    script. Not sent to Gemini."""
    contents: list[SharedJsonDict]
    """Gemini ``Content`` dicts, oldest first (roles ``user`` and ``model``): the history's
    as the transcript shares them (not copied)."""
    tools: list[JsonDict] = Field(default_factory=list)
    """Gemini ``FunctionDeclaration`` dicts."""
    calls_allowed: bool = True
    """False: the model may not call the tools it is shown (Gemini's function calling mode
    ``NONE``); a compaction's summary is sent the agent's tools only so that its request
    starts as the agent's do, and Gemini's cache serves that prefix."""
    response_schema: JsonDict | None = None
    """JSON schema of a structured final answer, when the run asks for one."""
    timeout_seconds: float = 60.0


class ModelTurn(BaseModel):
    """What the model answered, kept raw for replay and parsed for the engine."""

    model_config = ConfigDict(frozen=True)

    parts: list[JsonDict]
    """The candidate's parts exactly as returned (``Part`` dicts, thought signatures included)."""
    calls: list[FunctionCall] = Field(default_factory=list)
    text: str | None = None
    """Concatenated text parts (thoughts excluded); the answer when ``calls`` is empty."""
    usage: Usage = Usage()
    finish_reason: str | None = None
    model_version: str | None = None


class ModelClient(Protocol):
    """Calls a model once. No retries inside: redelivery of the step is the retry.

    Raises :class:`ackloop.domain.errors.ModelRetryableError` for 429 (with ``retry_after``), 5xx,
    timeouts and connection errors; :class:`ackloop.domain.errors.ModelPermanentError` for 400-class
    errors, safety blocks, empty candidates and malformed responses.
    """

    provider: str

    async def generate(self, request: ModelRequest) -> ModelTurn: ...


TextSink = Callable[[str], None]
"""Receives each piece of the answer's text as the model writes it (thoughts excluded)."""


@runtime_checkable
class StreamingModelClient(ModelClient, Protocol):
    """A model client that can also hand out its answer's text while the call runs.

    The turn it returns is the same one :meth:`generate` would: the pieces only show progress.
    """

    async def generate_streaming(self, request: ModelRequest, on_text: TextSink) -> ModelTurn: ...
