"""The scripted model of a whole deployment: each agent played by its own script.

In process, a model request names its agent (``ModelRequest.agent``, set by the model step).
The fake Gemini server sees only the REST body, so there the agent is the one whose
instructions and tool names the request carries. An agent without a script, or a request no
agent matches, is played by :class:`~ackloop.model.tool_sweep.TestModel`. Every script gives
a structured final answer when the agent asks for one (:func:`with_final_answer`).
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx

from ackloop.agents.agent import Agent
from ackloop.config.settings import Settings
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.final_answer_script import FINAL_ANSWER, with_final_answer
from ackloop.model.scripted import Script
from ackloop.model.tool_sweep import TestModel


def agent_script(agent: Agent) -> Script:
    """How the scripted model plays ``agent``."""
    return with_final_answer(agent.script or TestModel())


class CatalogScript:
    """A :data:`~ackloop.model.scripted.Script` playing every agent of a catalog."""

    def __init__(self, agents: Iterable[Agent]) -> None:
        self._scripts: dict[str, Script] = {}
        self._signatures: dict[tuple[str, frozenset[str]], str] = {}
        for agent in agents:
            self._scripts[agent.name] = agent_script(agent)
            names = frozenset(str(d.get("name")) for d in agent.tools.declarations())
            self._signatures.setdefault((agent.instructions, names), agent.name)
        self._fallback = with_final_answer(TestModel())

    def __call__(self, request: ModelRequest) -> ModelTurn:
        return self._scripts.get(self.agent_of(request) or "", self._fallback)(request)

    def agent_of(self, request: ModelRequest) -> str | None:
        """The agent a request is for: named on it, else matched by instructions and tools."""
        if request.agent is not None:
            return request.agent
        offered = frozenset(str(d.get("name")) for d in request.tools) - {FINAL_ANSWER}
        return self._signatures.get((request.system_instruction, offered))


def deployment_script(settings: Settings) -> CatalogScript:
    """The catalog ``settings`` name, played for a server that sees only REST bodies."""
    from ackloop.agents.catalog import load_agents

    # The tools never run in this process: the client is only handed to a catalog that asks.
    http = httpx.AsyncClient()
    return CatalogScript(load_agents(settings, http))
