"""Several toolboxes as one: an agent's ``@tool`` functions next to an MCP server's tools.

The engine sees one :class:`~ackloop.tools.base.Toolbox`. Names must be unique across the parts,
but a part's names may only be known after its ``prepare()`` (an MCP server lists its tools over
the network), so the check runs in :meth:`CombinedToolbox.prepare` as well as at construction:
two tools with one name are a permanent error of the step, never a silent choice of one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ackloop.domain.errors import PermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.tools.base import Toolbox, ToolContext, ToolOutcome, prepare_toolbox
from ackloop.tools.outcome import error_outcome


class DuplicateToolName(PermanentError, ValueError):
    """Two parts offer one name: a ValueError when an agent is built, a permanent failure of the
    step when it shows only after the parts are prepared."""

    def __init__(self, name: str) -> None:
        super().__init__(f"two of the agent's toolboxes offer a tool named {name!r}; rename one "
                         "(or leave it out with the MCP toolbox's include=)",
                         reason="duplicate_tool_name")


class CombinedToolbox:
    """The tools of every part, in order. Implements :class:`~ackloop.tools.base.Toolbox`."""

    def __init__(self, parts: Sequence[Toolbox]) -> None:
        self._parts = tuple(parts)
        self._owners: dict[str, Toolbox] = {}
        self._prepared = False
        self._index()

    @property
    def parts(self) -> tuple[Toolbox, ...]:
        return self._parts

    async def prepare(self) -> None:
        """Prepare every part (an MCP server's listing), then check the names again, once: the
        engine calls this on every step, and prepared parts do not change."""
        if self._prepared:
            return
        for part in self._parts:
            await prepare_toolbox(part)
        self._index()
        self._prepared = True

    def declarations(self) -> list[JsonDict]:
        return [d for part in self._parts for d in part.declarations()]

    def is_retry_safe(self, name: str) -> bool:
        owner = self._owners.get(name)
        check = getattr(owner, "is_retry_safe", None)
        # An unknown name is safe: running it again only produces the same error outcome.
        return bool(check(name)) if callable(check) else True

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        owner = self._owners.get(call.name)
        if owner is None:
            return error_outcome(f"unknown tool {call.name!r}; available tools: "
                                 f"{', '.join(self._owners) or 'none'}")
        return await owner.execute(call, context)

    def _index(self) -> None:
        owners: dict[str, Toolbox] = {}
        for part in self._parts:
            for declaration in part.declarations():
                name = str(declaration.get("name"))
                if name in owners:
                    raise DuplicateToolName(name)
                owners[name] = part
        self._owners = owners
