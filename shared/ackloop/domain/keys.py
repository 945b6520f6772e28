"""Deterministic step keys: the idempotency key of every step of a run.

A key names the step's position (turn, and the call's index within the turn) and its kind; the
step's *name* (``model`` or the tool's name) is stored beside it and checked on every delivery,
so a redelivery that finds a different step at the same position fails loudly instead of mixing
histories. Keys sort in execution order, which lets one document-id range query read a turn.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

StepKind = Literal["model", "tool"]

MAX_TURN = 9999
"""The last turn a key can name (four digits)."""
MAX_INDEX = 999
"""The last call index a key can name (three digits)."""

_KEY_RE = re.compile(r"^(?P<turn>\d{4})-(?P<kind>model|tool)(?:-(?P<index>\d{3}))?$")


@dataclass(frozen=True, order=True)
class StepKey:
    """Position of one step in a run: ``0003-model`` or ``0003-tool-001``."""

    turn: int
    kind: StepKind
    index: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.turn <= MAX_TURN or not 0 <= self.index <= MAX_INDEX:
            raise ValueError(f"step position out of range: turn={self.turn} index={self.index}")

    def __str__(self) -> str:
        if self.kind == "model":
            return f"{self.turn:04d}-model"
        return f"{self.turn:04d}-tool-{self.index:03d}"

    @classmethod
    def model(cls, turn: int) -> StepKey:
        return cls(turn, "model")

    @classmethod
    def tool(cls, turn: int, index: int) -> StepKey:
        return cls(turn, "tool", index)

    @classmethod
    def parse(cls, text: str) -> StepKey:
        match = _KEY_RE.match(text)
        if match is None:
            raise ValueError(f"not a step key: {text!r}")
        kind: StepKind = "model" if match["kind"] == "model" else "tool"
        return cls(int(match["turn"]), kind, int(match["index"] or 0))


def turn_range(turn: int) -> tuple[str, str]:
    """Document-id range holding the model step of ``turn`` and every tool step it asked for:
    what the model step of the next turn is scheduled by (one range query)."""
    return str(StepKey.model(turn)), f"{turn:04d}-tool-999"


def tool_turn_range(turn: int) -> tuple[str, str]:
    """Document-id range holding every tool step of ``turn`` AND the next turn's model step.

    One range query over it answers both "are all the tools of this turn done?" and "has the
    next model step already been claimed?".
    """
    return f"{turn:04d}-tool-", str(StepKey.model(turn + 1))


def run_id_for_request(request_id: str, caller: str = "anonymous") -> str:
    """The run id is a function of the caller and the request id, so a duplicate query finds
    the same run, and the same request id from two callers makes two runs. (An anonymous
    caller's ids are the request id's hash alone, as a query published to the topic has.)"""
    scoped = request_id if caller == "anonymous" else f"{caller}\n{request_id}"
    digest = hashlib.sha256(scoped.encode()).hexdigest()[:20]
    return f"run-{digest}"


_RUN_ID = re.compile(r"^run-[0-9a-f]{20}$")


def is_run_id(value: str) -> bool:
    """Whether ``value`` has the shape of a run id (:func:`run_id_for_request`): the id of a
    run that exists or may be created later. A conversation named by such an id is that run's
    own conversation, which the run starts (:meth:`ackloop.store.Runs.create_run`)."""
    return _RUN_ID.match(value) is not None


# Document ids a message id may be used as unchanged: Pub/Sub's are decimal digits.
_PLAIN_MESSAGE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
_HASHED_MESSAGE_ID = re.compile(r"^h~[0-9a-f]{40}$")


def message_doc_id(message_id: str) -> str:
    """The document id that records the message ``message_id`` (poison, dead letters).

    A message id comes from the request: one that is not plain (a ``/`` would nest the path,
    ``.``, ``__x__`` or a huge id are refused by Firestore) is replaced by its hash, so any id
    names exactly one document of the collection. A document id it returned is returned as is.
    """
    if _PLAIN_MESSAGE_ID.match(message_id) or _HASHED_MESSAGE_ID.match(message_id):
        return message_id
    digest = hashlib.sha256(message_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"h~{digest}"


def limiter_doc_id(name: str) -> str:
    """A limiter's document id for a key (a concurrency limit's slots, a spend limit's period):
    readable, never a path (a digest keeps it short and unique)."""
    safe = "".join(c if c.isalnum() or c in "-_.:@" else "_" for c in name)[:120]
    return f"{safe}~{hashlib.sha256(name.encode()).hexdigest()[:12]}"
