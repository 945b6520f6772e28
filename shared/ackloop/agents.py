"""Agents as configuration: instructions, tools, model and limits, run by the same engine.

A deployment hosts several agents; a query names one (``agent``, default ``"default"``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel

from ackloop.errors import PermanentError
from ackloop.tools.base import Toolbox

SEED_INSTRUCTIONS = """
You are a helpful agent that can use tools to help the user.
You will be given an input from the user and a list of tools to use.
You may or may not need to use the tools to satisfy the user ask.
If no tools are needed, respond in haikus.
""".strip()


@dataclass(frozen=True)
class AgentDefinition:
    name: str
    system_instruction: str
    toolbox: Toolbox
    model: str | None = None
    """Model name; None means the deployment's ``ACKLOOP_MODEL``."""
    max_steps: int | None = None
    max_seconds: float | None = None
    max_tool_calls: int | None = None
    max_tokens: int | None = None
    output_model: type[BaseModel] | None = None
    """When set, every run of this agent must end with an answer that validates as this model
    (offered to the model as a ``final_answer`` function); it becomes the run's ``output``."""


class UnknownAgent(PermanentError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(
            f"no agent named {name!r}; this deployment has {sorted(known)}", reason="unknown_agent"
        )


class AgentRegistry:
    def __init__(self, agents: Iterable[AgentDefinition] = ()) -> None:
        self._agents: dict[str, AgentDefinition] = {}
        for agent in agents:
            self.add(agent)

    def add(self, agent: AgentDefinition) -> None:
        if agent.name in self._agents:
            raise ValueError(f"agent {agent.name!r} is defined twice")
        self._agents[agent.name] = agent

    def get(self, name: str) -> AgentDefinition:
        agent = self._agents.get(name)
        if agent is None:
            raise UnknownAgent(name, self._agents)
        return agent

    def names(self) -> list[str]:
        return sorted(self._agents)
