"""Every message on the wire, one Pydantic model each, versioned and strict.

Messages carry ids and small call descriptors, never the conversation: the conversation lives in
Firestore (documents cap at 1 MiB, messages at 10 MB, and a message must stay cheap to redeliver).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from ackloop.domain import patterns
from ackloop.domain.document_sizes import depth, unstorable, value_size
from ackloop.domain.keys import MAX_INDEX, MAX_TURN

# Ids that end up in Firestore document paths: no "/", no leading "__", bounded length.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
_ID_RE = re.compile(ID_PATTERN)
Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]

MAX_QUERY_CHARS = 32_000

# A step's position must fit its key (``{turn:04d}-tool-{index:03d}``): a message beyond it
# could never be claimed, so the schema refuses it as poison.
MAX_CALLS_PER_TURN = MAX_INDEX + 1


def check_schema(schema: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless ``schema`` is a JSON Schema (draft 2020-12) of an object."""
    import jsonschema  # here: only a query asking for structured output has a schema to check

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"output_schema is not a valid JSON Schema: {exc.message}") from exc
    if schema.get("type") != "object":
        raise ValueError('output_schema must describe an object ("type": "object")')
    if patterns.has_pattern_properties(schema):
        raise ValueError("output_schema: patternProperties is not supported (use properties)")
    for pattern in patterns.schema_patterns(schema):
        patterns.compiled(pattern)  # ValueError says why RE2 refuses it


def storable_text(value: str) -> str:
    """Reject blank text. (Lone surrogates, which JSON can carry and Firestore cannot store,
    are already refused by Pydantic's string validation.)"""
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def is_identifier(value: str) -> bool:
    """True when ``value`` is safe to use as a Firestore document id."""
    return bool(_ID_RE.match(value)) and not value.startswith("__")


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


USAGE_COUNTS = ("model_calls", "tool_calls", "prompt_tokens", "output_tokens", "total_tokens",
                "cached_tokens", "thinking_tokens")
"""What a :class:`Usage` counts (its fields but ``children``)."""


class Usage(WireModel):
    """Cumulative resource use of a run. Carried on step messages so budgets need no extra read.

    A run's usage counts its child runs' (its sub-agents' calls, :mod:`ackloop.engine.children`,
    each child's whole tree) from the step that records each call's result: ``children`` is
    that part, apart (one level: what the children's own children used is in their figures, not
    broken down further). What the run used itself is :meth:`own`."""

    model_calls: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    # The parts below are left out when empty: a run without them carries, stores and shows
    # exactly what it did before, and a step message grows only by what a model reported.
    cached_tokens: int = Field(
        default=0, ge=0, exclude_if=lambda v: v == 0,
        description="Of `prompt_tokens`, those Gemini served from its cache (a repeated start "
        "of the request; billed at the cached rate); left out when 0.")
    thinking_tokens: int = Field(
        default=0, ge=0, exclude_if=lambda v: v == 0,
        description="Of `output_tokens`, the model's thinking; left out when 0.")
    children: Usage | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="The part of these figures that the run's child runs used (its sub-agents' "
        "calls whose results it has, each child's own children included); left out when it "
        "has none. What the run used itself is these figures less this part.",
    )

    def plus(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name)
                        for name in USAGE_COUNTS},
                     children=_some(_counts(self.children).plus(_counts(other.children))
                                    if self.children is not None or other.children is not None
                                    else None))

    def minus(self, other: Usage) -> Usage:
        """What is left of this once ``other`` (a part of it) is taken out; never below 0."""
        return Usage(**{name: max(0, getattr(self, name) - getattr(other, name))
                        for name in USAGE_COUNTS},
                     children=_some(self.children.minus(_counts(other.children))
                                    if self.children is not None else None))

    def counts(self) -> Usage:
        """These figures alone, without the children's part apart."""
        return self if self.children is None else self.model_copy(update={"children": None})

    def own(self) -> Usage:
        """What the run used itself: these figures less its children's."""
        return self.counts() if self.children is None else self.counts().minus(self.children)

    def with_child(self, child: Usage) -> Usage:
        """These figures with a child run's usage (its whole tree) added, to the totals and to
        the children's part."""
        return self.plus(self.child_part(child))

    @staticmethod
    def child_part(child: Usage) -> Usage:
        """A child run's usage as its parent counts it: all of it, and all of it its
        children's."""
        return child.counts().model_copy(update={"children": _some(child.counts())})

    def children_part(self) -> Usage:
        """The children's part as a usage of its own: what :meth:`with_child` added."""
        return Usage() if self.children is None else self.child_part(self.children)


def _counts(usage: Usage | None) -> Usage:
    return Usage() if usage is None else usage.counts()


def _some(usage: Usage | None) -> Usage | None:
    """``usage``, or None when it counts nothing."""
    if usage is None or not any(getattr(usage, name) for name in USAGE_COUNTS):
        return None
    return usage


class RunOptions(WireModel):
    """Optional per-run settings; anything left out takes the deployment's default."""

    max_steps: int | None = Field(default=None, ge=1, le=1000,
                                  description="Model steps (its child runs' included).")
    max_seconds: float | None = Field(default=None, gt=0, le=86_400, description="Wall clock.")
    max_tool_calls: int | None = Field(default=None, ge=0, le=10_000,
                                       description="Tool calls (its child runs' included).")
    max_tokens: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="Total tokens (its child runs' included)."
    )
    priority: int = Field(
        default=0, ge=0, le=9, exclude_if=lambda v: v == 0,
        description="Where the run's model calls waiting for their "
        "places under a quota stand in line: a higher priority is served first (0, the "
        "default, to 9; its child runs have it too).")
    tenant: Identifier | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Who the run is asked for, as the deployment's concurrency limits keyed "
        "by tenant count it (its child runs count as theirs).")
    approval_timeout_seconds: float | None = Field(
        default=None, gt=0, le=2_592_000,
        description="Longest a call waits for a person's approval before it is rejected (a "
        "tool's own, when shorter, wins).",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema (an object) the final answer must match; it becomes `output`.",
    )

    @field_validator("output_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate: Firestore cannot store it
                raise ValueError("output_schema holds text that is not valid Unicode (a lone "
                                 "surrogate such as \\ud800)") from exc
            if len(str(value)) > 32_000 or depth(value) > 12:
                raise ValueError("output_schema is too large or too deeply nested")
            check_schema(value)
        return value


class InlineData(WireModel):
    """A file's bytes in the query itself, as Gemini's ``inline_data`` part has them."""

    mime_type: Annotated[str, StringConstraints(min_length=1, max_length=255)] = Field(
        description="The file's type, e.g. application/pdf or image/png (accepted types: "
        "ackloop.files.ACCEPTED_TYPES).")
    data: str = Field(description="The file's bytes, base64 (standard alphabet, padded).")
    display_name: Annotated[str, StringConstraints(max_length=512)] | None = Field(
        default=None, description="The file's name, kept with it (not sent to Gemini).")


class FileData(WireModel):
    """A file the caller keeps elsewhere, by URI, as Gemini's ``file_data`` part names it."""

    file_uri: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = Field(
        description="gs://bucket/object or https://... : passed to Gemini as given.")
    mime_type: Annotated[str, StringConstraints(min_length=1, max_length=255)] = Field(
        description="The file's type (accepted types: ackloop.files.ACCEPTED_TYPES).")
    display_name: Annotated[str, StringConstraints(max_length=512)] | None = Field(
        default=None, description="The file's name, kept with it (not sent to Gemini).")


class FilePart(WireModel):
    """One file of a query: exactly one of ``inline_data`` (bytes) and ``file_data`` (a URI).
    Sizes, types and URI schemes are checked when the run is created (``ackloop.files``), so
    each refusal says which limit it broke."""

    inline_data: InlineData | None = Field(default=None, exclude_if=lambda v: v is None)
    file_data: FileData | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _one_kind(self) -> FilePart:
        if (self.inline_data is None) == (self.file_data is None):
            raise ValueError("a file is exactly one of inline_data (mime_type and base64 data) "
                             "and file_data (file_uri and mime_type)")
        return self


class QueryMessage(WireModel):
    """A user's question, published to the queries topic (schema version 1).

    ``request_id`` is the idempotency key: the same id delivered or posted twice starts one run.
    ``files``: what the question is about (inline bytes or URIs), checked and stored when the
    run is created; left out of the message when there are none.
    """

    v: Literal[1] = 1
    request_id: Identifier
    text: Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS)]
    conversation_id: Identifier | None = None
    agent: Identifier = "default"
    options: RunOptions = RunOptions()
    files: list[FilePart] = Field(default_factory=list, exclude_if=lambda v: not v)

    @field_validator("text")
    @classmethod
    def _storable(cls, value: str) -> str:
        return storable_text(value)


MAX_EVENT_PAYLOAD_BYTES = 16 * 1024
"""The most an event's payload may be, measured as Firestore stores it
(:func:`ackloop.domain.document_sizes.value_size`: a number is 8 bytes, not its digits)."""
MAX_PAYLOAD_DEPTH = 16
"""How deep the maps and arrays of a caller's JSON value (an event's payload, an approval's
edited arguments) may nest: it is stored a few levels down in a document, and Firestore refuses
a document nested deeper than 20."""


def check_json_value(value: Any, what: str, max_bytes: int) -> None:
    """ValueError when ``value`` nests deeper than :data:`MAX_PAYLOAD_DEPTH`, holds what
    Firestore cannot store (an array directly in an array), or is larger than ``max_bytes`` as
    Firestore sizes it (or as compact JSON, whichever is more)."""
    levels = depth(value)
    if levels > MAX_PAYLOAD_DEPTH:
        raise ValueError(f"{what} nests {levels} levels of objects and arrays; at most "
                         f"{MAX_PAYLOAD_DEPTH}")
    if (why := unstorable({"value": value})) is not None:
        raise ValueError(f"{what} cannot be stored: {why}")
    size = max(value_size(value),
               len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()))
    if size > max_bytes:
        raise ValueError(f"{what} is {size} bytes as stored (a number counts 8); at most "
                         f"{max_bytes}")


def check_event_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` when it fits an event (:data:`MAX_EVENT_PAYLOAD_BYTES`, nested at most
    :data:`MAX_PAYLOAD_DEPTH`), else ValueError."""
    check_json_value(payload, "the payload", MAX_EVENT_PAYLOAD_BYTES)
    return payload


class EventMessage(WireModel):
    """A named event for a run, published to the queries topic; told from a
    :class:`QueryMessage` by ``type``. The calls of the run waiting for ``name`` resume with
    ``payload`` (:mod:`ackloop.engine.waits.arrivals`); each name is received once per run."""

    v: Literal[1] = 1
    type: Literal["event"]
    run_id: Identifier
    name: Identifier
    payload: dict[str, Any] = Field(default_factory=dict)
    id: Identifier | None = None
    """The sender's id for the event: sending it again with the same id and payload is
    recognised as a repeat; without one, the payload alone is compared."""

    @field_validator("payload")
    @classmethod
    def _fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_event_payload(value)


class ChildEndedMessage(WireModel):
    """A child run has ended (:mod:`ackloop.engine.children`), published to the queries topic
    by the commit that ended it; told from a query by ``type``. It names the child and carries
    nothing else: its handler reads the child's end from the child's record and delivers it to
    the parent's waiting call."""

    v: Literal[1] = 1
    type: Literal["child_ended"]
    run_id: Identifier


class FunctionCall(WireModel):
    """One function call the model asked for, as Gemini returned it."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class ModelStepMessage(WireModel):
    """Run the model for ``turn`` of ``run_id`` (schema version 1)."""

    v: Literal[1] = 1
    kind: Literal["model"] = "model"
    run_id: Identifier
    turn: int = Field(ge=0, le=MAX_TURN)
    usage: Usage = Usage()


class ToolStepMessage(WireModel):
    """Run call ``index`` of the ``call_count`` calls the model made at ``turn`` (version 1)."""

    v: Literal[1] = 1
    kind: Literal["tool"] = "tool"
    run_id: Identifier
    turn: int = Field(ge=0, le=MAX_TURN)
    index: int = Field(ge=0, lt=MAX_CALLS_PER_TURN)
    call_count: int = Field(ge=1, le=MAX_CALLS_PER_TURN)
    call: FunctionCall
    agent: Identifier = "default"
    usage: Usage = Usage()


StepMessage = ModelStepMessage | ToolStepMessage
"""A step message, either kind: the one union the engine names them by (``isinstance`` takes
it too), so a third kind of step is added here alone."""


class WaitingNotice(WireModel):
    """A run waits for a person or a named event, published to the answers topic beside the
    run ends (at least once: dedupe on ``run_id`` and ``step``). Tell it from an
    :class:`AnswerMessage` by ``event``, which an answer does not have."""

    v: Literal[1] = 1
    event: Literal["waiting"] = "waiting"
    run_id: Identifier
    request_id: Identifier
    conversation_id: Identifier
    step: str
    waiting_for: str = "approval"
    """What someone is to send: a person's decision (``approval``: ``POST
    /runs/{id}/approvals/{step}``) or a named event (``event``); the kinds that announce
    themselves name it (``ackloop.engine.waits.kinds``)."""
    event_name: str | None = None
    """The awaited event (``waiting_for == "event"``): ``POST /runs/{id}/events/{name}``."""
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    deadline: float
    """Unix time after which no decision (or no event) means a rejection."""


class RunOutcome(BaseModel):
    """How a run ended (or, on a view of a run still going, where it stands): the one
    declaration of these fields. The answers topic's :class:`AnswerMessage`, the run's record
    and its end (``ackloop.domain.records.RunRecord``, ``ackloop.store.base.RunEnd``), the HTTP
    views
    (``ackloop.api.models.RunOutcomeView``) and the tester's ``AgentResult`` derive from it, so
    each says it under the same names."""

    status: str
    stop_reason: str | None = None
    answer: str | None = None
    output: Any = None
    """The structured answer of an agent with ``output=`` (a dict), else None."""
    error: str | None = None
    usage: Usage = Usage()

    def outcome(self) -> dict[str, Any]:
        """The outcome's fields alone, enums as their values: what a view that derives from
        :class:`RunOutcome` takes from a record or an end."""
        fields = {name: getattr(self, name) for name in RunOutcome.model_fields}
        for name in ("status", "stop_reason"):
            fields[name] = getattr(fields[name], "value", fields[name])
        return fields


class _AnswerHead(WireModel):
    """An answer's version and ids, first in the message (a base of their own so the
    :class:`RunOutcome` fields keep their place after them)."""

    v: Literal[1] = 1
    run_id: Identifier
    request_id: Identifier
    conversation_id: Identifier


class AnswerMessage(RunOutcome, _AnswerHead):
    """A finished run, published to the answers topic (at least once: dedupe on ``run_id``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stop_reason: str  # an ended run always has one
