"""A set of tools the engine can declare to the model and run: the :class:`Toolbox` adapter."""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.telemetry.masking import mask_json, mask_secrets
from ackloop.tools.arguments import InvalidArguments, parse_arguments
from ackloop.tools.base import ToolContext, ToolOutcome
from ackloop.tools.definition import Tool
from ackloop.tools.errors import FinalResult, ToolError
from ackloop.tools.outcome import error_outcome, success_outcome

logger = logging.getLogger(__name__)


class ToolSet:
    """Tools by name. Implements :class:`ackloop.tools.base.Toolbox`.

    ``known_secrets`` are literal values (API keys the deployment holds, say) masked in every
    outcome and in this module's logs, on top of the shapes :func:`mask_secrets` recognises.
    """

    def __init__(self, tools: Iterable[Tool], *, known_secrets: Iterable[str] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            if item.name in self._tools:
                raise ValueError(f"two tools are named {item.name!r}")
            self._tools[item.name] = item
        self._known = tuple(secret for secret in known_secrets if secret)
        # Built once: the tools never change, and every model step sends them.
        self._declarations = tuple(item.declaration() for item in self._tools.values())

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        """Tool names, in the order the tools were given."""
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def is_retry_safe(self, name: str) -> bool:
        """Whether re-running a call of ``name`` after a crash is harmless.

        An unknown name is safe: running it again only produces the same error outcome.
        """
        found = self._tools.get(name)
        return found.retry_safe if found is not None else True

    def declarations(self) -> list[JsonDict]:
        """Gemini ``FunctionDeclaration`` dicts, flat (no ``$ref``), one per tool."""
        return [dict(declaration) for declaration in self._declarations]

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        """Run ``call``. Tool failures become error outcomes; only cancellation propagates.

        The call is cut at the tool's ``timeout_seconds``, never later than
        ``context.timeout_seconds``, so the model reads "timed out" instead of the step dying.
        """
        found = self._tools.get(call.name)
        if found is None:
            available = ", ".join(self._tools) or "none"
            return self._error(f"unknown tool {call.name!r}; available tools: {available}")
        try:
            args = parse_arguments(found, call.args)
        except InvalidArguments as exc:
            return self._error(str(exc))

        limit = min(found.timeout_seconds or context.timeout_seconds, context.timeout_seconds)
        started = time.monotonic()
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                value: Any = await found.call(args, context)
        except FinalResult as final:
            value = final
        except ToolError as exc:
            self._log(logging.INFO, call, context, started, f"error for the model: {exc}")
            return self._error(str(exc))
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline.expired():
                self._log(logging.WARNING, call, context, started, f"timed out after {limit:g} s")
                return self._error(
                    f"{call.name} timed out after {limit:g} s; try again later or continue "
                    "without it"
                )
            return self._unexpected(call, context, started, exc)

        try:
            if isinstance(value, ToolOutcome):
                outcome = self._remask(value)
            elif isinstance(value, FinalResult):
                outcome = success_outcome(
                    value.value, found.max_output_bytes, final=True, known=self._known
                )
            else:
                outcome = success_outcome(value, found.max_output_bytes, known=self._known)
        except (TypeError, ValueError) as exc:
            return self._unexpected(call, context, started, exc)
        self._log(logging.INFO, call, context, started, "final" if outcome.final else "ok")
        return outcome

    def _error(self, message: str) -> ToolOutcome:
        return error_outcome(message, known=self._known)

    def _remask(self, outcome: ToolOutcome) -> ToolOutcome:
        """A tool that built its own outcome still gets its secrets masked."""
        return outcome.model_copy(update={"response": mask_json(outcome.response, self._known)})

    def _unexpected(
        self, call: FunctionCall, context: ToolContext, started: float, exc: Exception
    ) -> ToolOutcome:
        # The model gets the type only: the message may hold URLs, keys or internals. The
        # detail goes to the log, masked here because we cannot know how logging is set up.
        detail = "".join(traceback.format_exception(exc)).rstrip()
        self._log(logging.WARNING, call, context, started, f"failed unexpectedly:\n{detail}")
        return self._error(f"tool failed with {type(exc).__name__}")

    def _log(
        self,
        level: int,
        call: FunctionCall,
        context: ToolContext,
        started: float,
        what: str,
    ) -> None:
        elapsed_ms = (time.monotonic() - started) * 1000
        logger.log(
            level,
            "tool %s run=%s step=%s attempt=%d %.0f ms: %s",
            call.name,
            context.run_id,
            context.step_key,
            context.attempt,
            elapsed_ms,
            mask_secrets(what, self._known),
        )
