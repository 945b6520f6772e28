"""The two exceptions a tool raises on purpose."""

from __future__ import annotations

from typing import Any

from ackloop.domain.errors import AckloopError


class ToolError(AckloopError):
    """A failure the model can act on. Its message is what the model reads, so write it for the
    model: say what went wrong and what to do ("the CEP 0000 does not exist; check the digits").

    Any other exception reaches the model only as its type name; its detail goes to the log.
    """


class FinalResult(Exception):
    """End the run with ``value`` as its output, without another model turn.

    A tool may return it or raise it (raising works from deep inside helper code). ``value`` must
    be a string or JSON-able (a Pydantic model is dumped in JSON mode).
    """

    def __init__(self, value: Any) -> None:
        super().__init__("final result")
        self.value = value
