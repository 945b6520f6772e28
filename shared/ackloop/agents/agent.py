"""Agents as configuration: instructions, tools, model and limits, run by the same engine.

A deployment hosts several agents; a query names one (``agent``, default ``"default"``). When
no agent is named ``default``, the catalog's first agent a query may start answers queries that
name none, so a user's catalog of one agent needs no special name. An ``internal`` agent is
reached only as another agent's sub-agent (``as_tool``) or hand-off target (``as_handoff``): no
query may name it (:meth:`AgentRegistry.for_query`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from ackloop.domain.context_window import DEFAULT_CONTEXT, Context
from ackloop.domain.errors import PermanentError
from ackloop.tools.base import Toolbox

if TYPE_CHECKING:
    from ackloop.domain.schedules import Schedule
    from ackloop.model.scripted import Script
    from ackloop.tools.definition import Tool

DEFAULT_AGENT = "default"
SEED_INSTRUCTIONS = """
You are a helpful agent that can use tools to help the user.
You will be given an input from the user and a list of tools to use.
You may or may not need to use the tools to satisfy the user ask.
If no tools are needed, respond in haikus.
""".strip()

# The wire's id: what a query's ``agent`` field accepts.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


class Agent:
    """One agent: what it is told, the tools it may call, its model and its budgets.

    ``tools`` is a list of :class:`~ackloop.tools.definition.Tool` (made with ``@tool``) and
    :class:`~ackloop.tools.base.Toolbox` objects (``mcp_tools(server)``, say), or one Toolbox.
    ``model`` names the model (None: the deployment's ``ACKLOOP_MODEL``). The ``max_*``
    budgets override the deployment's defaults for this agent; a query's options override them
    in turn. ``output`` is a Pydantic model every run must end with (offered to the model as a
    ``final_answer`` function; it becomes the run's ``output``). ``script`` plays this agent
    when the model is scripted (offline, or in tests): a
    :class:`~ackloop.model.function_model.FunctionModel`,
    :class:`~ackloop.model.function_model.ScriptedTurns` or
    :class:`~ackloop.model.tool_sweep.TestModel`; None means ``TestModel()``. ``context`` is
    the policy for long conversations (:class:`~ackloop.domain.context_window.Context`; None: the
    default,
    which compacts a request past 64,000 input tokens into a summary and the last 4 model
    turns). ``internal``: the agent exists only to be a sub-agent or a hand-off target; a query
    that names it is refused (the HTTP API's ``internal_agent``, a query message's poison
    record), while child runs and hand-offs reach it as any other.
    """

    def __init__(
        self,
        name: str,
        instructions: str,
        tools: Sequence[Tool | Toolbox] | Toolbox = (),
        *,
        model: str | None = None,
        max_steps: int | None = None,
        max_seconds: float | None = None,
        max_tool_calls: int | None = None,
        max_tokens: int | None = None,
        output: type[BaseModel] | None = None,
        script: Script | None = None,
        context: Context | None = None,
        internal: bool = False,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"agent name {name!r} must be 1-128 characters of A-Z a-z 0-9 . _ : @ -, "
                "starting with a letter or digit (a query names the agent by it)"
            )
        if not isinstance(instructions, str):
            raise TypeError(f"agent {name!r}: instructions must be a string")
        for budget, value in (("max_steps", max_steps), ("max_seconds", max_seconds),
                              ("max_tokens", max_tokens)):
            if value is not None and value <= 0:
                raise ValueError(f"agent {name!r}: {budget} must be positive, got {value}")
        if max_tool_calls is not None and max_tool_calls < 0:
            raise ValueError(f"agent {name!r}: max_tool_calls must be 0 or more")
        if output is not None and not (isinstance(output, type) and issubclass(output, BaseModel)):
            raise TypeError(f"agent {name!r}: output must be a Pydantic model class")
        if context is not None and not isinstance(context, Context):
            raise TypeError(f"agent {name!r}: context must be an ackloop.Context")
        if script is not None and not callable(script):
            raise TypeError(f"agent {name!r}: script must be a FunctionModel, ScriptedTurns or "
                            "TestModel")
        self.name = name
        self.instructions = instructions
        self.tools: Toolbox = _toolbox(name, tools)
        self.model = model
        self.max_steps = max_steps
        self.max_seconds = max_seconds
        self.max_tool_calls = max_tool_calls
        self.max_tokens = max_tokens
        self.output = output
        self.script = script
        self.context = context if context is not None else DEFAULT_CONTEXT
        self.internal = bool(internal)

    def as_tool(
        self, description: str | None = None, *, name: str | None = None,
        max_steps: int | None = None, max_seconds: float | None = None,
        max_tool_calls: int | None = None, max_tokens: int | None = None,
    ) -> Tool:
        """This agent as a tool another agent calls: each call is a durable child run of this
        agent, asked the call's ``question`` (:mod:`ackloop.engine.children`). The budgets cap
        the child's (never more than its share of what the calling run has left:
        :func:`ackloop.engine.children.left`). The tool is named ``ask_<agent>`` (each
        character of the agent's name that a function name cannot hold becomes ``_``:
        ``Agent("sales-team")`` gives ``ask_sales_team``) unless ``name`` says otherwise. The
        catalog that holds the caller must hold this agent too (:class:`AgentRegistry` refuses
        it otherwise); ``AgentTester`` and ``run_agent`` register it themselves."""
        from ackloop.tools.definition import SubAgent, Tool

        class Question(BaseModel):
            question: str = Field(description=f"What to ask agent {self.name!r}: the whole "
                                  "task, with everything it needs to know.")

        return Tool(
            name=name or self._tool_name("ask_"),
            description=description or (f"Ask agent {self.name!r} to do a task and answer; "
                                        f"its instructions begin: {self.instructions[:200]}"),
            args_model=Question, call=_run_by_the_engine, arg_name=None, retry_safe=False,
            sub_agent=SubAgent(self.name, max_steps, max_seconds, max_tool_calls, max_tokens),
            target=self,
        )

    def as_handoff(self, description: str | None = None, *, name: str | None = None) -> Tool:
        """A tool that hands the conversation over to this agent: the run's next turn is this
        agent's (its instructions and tools, the whole conversation so far), and so are the
        conversation's later runs, until an agent hands it on again (recorded on the tool
        step, the model step, the run and the conversation). The tool is named
        ``transfer_to_<agent>`` (``transfer_to_sales_team`` for ``Agent("sales-team")``) unless
        ``name`` says otherwise; the catalog must hold this agent too, as for :meth:`as_tool`."""
        from ackloop.tools.definition import Tool

        class Note(BaseModel):
            note: str = Field(default="", description="What the next agent should know.")

        return Tool(
            name=name or self._tool_name("transfer_to_"),
            description=description or (f"Hand the conversation over to agent {self.name!r}, "
                                        f"who continues it; its instructions begin: "
                                        f"{self.instructions[:200]}"),
            args_model=Note, call=_run_by_the_engine, handoff=self.name, target=self,
        )

    def reaches(self) -> list[tuple[str, str, Agent | None]]:
        """The agents this one's own tools reach, as (tool, agent's name, the agent when the
        tool was made by ``as_tool`` or ``as_handoff``): its sub-agents and hand-off targets.
        Tools of a toolbox known only once prepared (an MCP server's) reach none."""
        found = []
        for tool in _local_tools(self.tools):
            name = tool.sub_agent.agent if tool.sub_agent is not None else tool.handoff
            if name is not None:
                target = tool.target if isinstance(tool.target, Agent) else None
                found.append((tool.name, name, target))
        return found

    def _tool_name(self, prefix: str) -> str:
        """``prefix`` and this agent's name, as a function name Gemini accepts."""
        return f"{prefix}{re.sub(r'[^A-Za-z0-9_]', '_', self.name)}"[:64]

    def __repr__(self) -> str:
        return f"Agent({self.name!r})"


async def _run_by_the_engine(args: BaseModel, context: object) -> None:
    """The ``call`` of a sub-agent's or a hand-off's tool: the engine runs such a call itself
    (:mod:`ackloop.engine.children`, the tool step), never through its tool."""
    raise RuntimeError("a sub-agent's or a hand-off's call is run by the engine, not its tool")


def _local_tools(box: Toolbox) -> Iterator[Tool]:
    """The tools of ``box`` known before it is prepared: a ToolSet's, and those of the
    ToolSets in a CombinedToolbox."""
    from ackloop.tools.combined import CombinedToolbox
    from ackloop.tools.toolset import ToolSet

    if isinstance(box, ToolSet):
        yield from box
    elif isinstance(box, CombinedToolbox):
        for part in box.parts:
            yield from _local_tools(part)


def with_reached(agents: Iterable[Agent]) -> list[Agent]:
    """``agents`` and every agent their sub-agent and hand-off tools reach, transitively (an
    agent named twice is the first one met): what a test of one agent needs registered."""
    found: dict[str, Agent] = {}
    pending = list(agents)
    while pending:
        agent = pending.pop(0)
        if agent.name in found:
            continue
        found[agent.name] = agent
        pending += [target for _, _, target in agent.reaches() if target is not None]
    return list(found.values())


def _toolbox(agent: str, tools: Sequence[Tool | Toolbox] | Toolbox) -> Toolbox:
    """A list of tools becomes a ToolSet; a Toolbox is taken as it is; a list that mixes tools
    and toolboxes (``[lookup_order, mcp_tools(server)]``) becomes one
    :class:`~ackloop.tools.combined.CombinedToolbox`. Names are checked for duplicates here as
    far as they are known, and again once every toolbox is prepared."""
    from ackloop.tools.definition import Tool
    from ackloop.tools.toolset import ToolSet

    if isinstance(tools, Tool):
        raise TypeError(f"agent {agent!r}: tools must be a list of tools (made with @tool) and "
                        f"toolboxes: write tools=[{tools.name}]")
    if isinstance(tools, Sequence) and not isinstance(tools, str):
        loose = [t for t in tools if isinstance(t, Tool)]
        boxes = [_checked(agent, t) for t in tools if not isinstance(t, Tool)]
        try:
            if not boxes:
                return ToolSet(loose)
            from ackloop.tools.combined import CombinedToolbox

            return CombinedToolbox([ToolSet(loose), *boxes] if loose else boxes)
        except ValueError as exc:  # DuplicateToolName is a ValueError too
            raise ValueError(f"agent {agent!r}: {exc}") from exc
    return _checked(agent, tools)


def _checked(agent: str, tools: object) -> Toolbox:
    if not (callable(getattr(tools, "declarations", None))
            and callable(getattr(tools, "execute", None))):
        raise TypeError(f"agent {agent!r}: tools must be a list of tools (made with @tool) and "
                        f"toolboxes (mcp_tools(...), a ToolSet), got {type(tools).__name__}")
    box: Toolbox = tools  # type: ignore[assignment]
    names = [str(d.get("name")) for d in box.declarations()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"agent {agent!r}: two tools are named {twice[0]!r}")
    return box


class UnknownAgent(PermanentError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(
            f"no agent named {name!r}; this deployment has {sorted(known)}", reason="unknown_agent"
        )


class InternalAgent(PermanentError):
    def __init__(self, name: str, startable: Iterable[str]) -> None:
        super().__init__(
            f"agent {name!r} is internal: it answers only as another agent's sub-agent or "
            f"hand-off target, never a query; a query may name {sorted(startable)}",
            reason="internal_agent",
        )


class MissingAgent(ValueError):
    """A catalog whose sub-agent or hand-off tool names an agent it does not hold."""


class AgentRegistry:
    """The deployment's agents by name; ``"default"`` falls back to the first one given.
    ``schedules``: the catalog's schedules (:class:`~ackloop.domain.schedules.Schedule`), each
    naming one of the agents."""

    def __init__(self, agents: Iterable[Agent] = (), schedules: Iterable[Schedule] = ()
                 ) -> None:
        self._agents: dict[str, Agent] = {}
        for agent in agents:
            self.add(agent)
        self.check_reached()
        self.schedules: list[Schedule] = list(schedules)
        self.check_schedules()

    def check_schedules(self) -> None:
        """Refuse a schedule naming an agent the catalog does not hold, or an id used twice."""
        seen: set[str] = set()
        for schedule in self.schedules:
            if schedule.id in seen:
                raise MissingAgent(f"two schedules have the id {schedule.id!r}")
            seen.add(schedule.id)
            if schedule.agent not in self:
                raise MissingAgent(
                    f"schedule {schedule.id!r} names agent {schedule.agent!r}, which the "
                    f"catalog does not hold (it has {sorted(self._agents)})")

    def check_reached(self) -> None:
        """Refuse a catalog whose sub-agent or hand-off tool names an agent it does not hold
        (the model would read "no agent …" and the run end as if all were well)."""
        for agent in self._agents.values():
            for tool, name, _ in agent.reaches():
                if name not in self:
                    raise MissingAgent(
                        f"agent {agent.name!r}: its tool {tool!r} reaches agent {name!r}, which "
                        f"the catalog does not hold: add {name!r} to the catalog (it has "
                        f"{sorted(self._agents)})")

    def add(self, agent: Agent) -> None:
        if agent.name in self._agents:
            raise ValueError(f"agent {agent.name!r} is defined twice")
        self._agents[agent.name] = agent

    def get(self, name: str) -> Agent:
        """The agent named ``name``, whoever asks (the engine: child runs, hand-offs, steps);
        ``"default"`` without such an agent: the first one a query may start (else the
        first)."""
        agent = self._agents.get(name)
        if agent is None and name == DEFAULT_AGENT and self._agents:
            agents = list(self._agents.values())
            return next((a for a in agents if not a.internal), agents[0])
        if agent is None:
            raise UnknownAgent(name, self.startable_names())
        return agent

    def for_query(self, name: str) -> Agent:
        """The agent a query that names ``name`` starts: :class:`UnknownAgent` when there is
        none, :class:`InternalAgent` when it is internal (a sub-agent or hand-off target
        only)."""
        agent = self.get(name)
        if agent.internal:
            raise InternalAgent(agent.name, self.startable_names())
        return agent

    def __contains__(self, name: object) -> bool:
        return name in self._agents or (name == DEFAULT_AGENT and bool(self._agents))

    def startable_names(self) -> list[str]:
        """The agents a query may name (every one but the internal ones)."""
        return sorted(name for name, agent in self._agents.items() if not agent.internal)

    def __iter__(self) -> Iterator[Agent]:
        return iter(self._agents.values())

    def names(self) -> list[str]:
        return sorted(self._agents)
