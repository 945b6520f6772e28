"""``research-team``: a planner that asks two sub-agents at once, to try agents that call agents.

The planner (the agent ``research-team``) calls ``ask_researcher`` and ``ask_critic`` in one
turn: each call is a durable child run of that agent (:meth:`~ackloop.agents.Agent.as_tool`,
:mod:`ackloop.engine.children`), and the planner's calls wait for their ends holding nothing.
Then it answers with what each said (or why it said nothing). ``researcher`` and ``critic`` are
agents of their own (no tools), which a query may also name.

Offline the three are played by one script, :func:`team_script`, from what each request shows:
the agent it names (``request.agent`` in process; over the fake Gemini server's REST body, the
agent whose instructions the request carries), the question, and the results so far. It keeps
no state and draws nothing at random, so a redelivered step gets the same turn.
"""

from __future__ import annotations

from ackloop.agents import Agent
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.transcript import ToolResult, read_exchange
from ackloop.model.turns import calls_turn, text_turn

NAME = "research-team"
RESEARCHER = "researcher"
CRITIC = "critic"

PLANNER_INSTRUCTIONS = (
    "You plan a piece of research. Ask the researcher for the facts and the critic for what "
    "could be wrong, both at once, then answer with what each of them said.")
RESEARCHER_INSTRUCTIONS = (
    "You are a researcher. Answer the question with the facts that bear on it, briefly.")
CRITIC_INSTRUCTIONS = (
    "You are a critic. Say briefly what could be wrong with, or is missing from, the question "
    "or the plan it describes.")

ASK_RESEARCHER = f"ask_{RESEARCHER}"
ASK_CRITIC = f"ask_{CRITIC}"
_BY_INSTRUCTIONS = {PLANNER_INSTRUCTIONS: NAME, RESEARCHER_INSTRUCTIONS: RESEARCHER,
                    CRITIC_INSTRUCTIONS: CRITIC}


def researcher_question(question: str) -> str:
    """What the planner asks the researcher about the user's ``question``."""
    return f"What are the facts about: {question}"


def critic_question(question: str) -> str:
    """What the planner asks the critic about the user's ``question``."""
    return f"What could be wrong with: {question}"


def researcher_answer(question: str) -> str:
    """The researcher's offline answer to ``question`` (the text its run was asked)."""
    return f"Findings on {_topic(question)!r}: two sources agree on the main points."


def critic_answer(question: str) -> str:
    """The critic's offline answer to ``question`` (the text its run was asked)."""
    return f"Caveats on {_topic(question)!r}: the sources are few and not independent."


def planner_answer(researcher: str, critic: str) -> str:
    """The planner's offline answer, from what each sub-agent said."""
    return f"Researcher: {researcher}\nCritic: {critic}"


def _topic(question: str) -> str:
    """The user's words in a sub-agent's question (the whole question when it is not the
    planner's)."""
    _, colon, topic = question.partition(": ")
    return (topic if colon else question).strip()[:200]


def agent_of(request: ModelRequest) -> str:
    """Which of the team the request is for: the agent it names, else the one whose
    instructions it carries, else the planner when it offers the sub-agents' tools."""
    if request.agent in (NAME, RESEARCHER, CRITIC):
        return request.agent
    if (found := _BY_INSTRUCTIONS.get(request.system_instruction)) is not None:
        return found
    offered = {str(d.get("name")) for d in request.tools}
    return NAME if ASK_RESEARCHER in offered else RESEARCHER


def _said(result: ToolResult) -> str:
    """What a sub-agent's call came back with: its answer, or the error its run ended with."""
    if result.error is not None:
        return f"(no answer: {result.error})"
    return str(result.result)


def team_script(request: ModelRequest) -> ModelTurn:
    """The offline model of the whole team (see the module's doc)."""
    exchange = read_exchange(request.contents)
    agent = agent_of(request)
    if agent == RESEARCHER:
        return text_turn(researcher_answer(exchange.question), request=request)
    if agent == CRITIC:
        return text_turn(critic_answer(exchange.question), request=request)
    asked = {ASK_RESEARCHER: researcher_question(exchange.question),
             ASK_CRITIC: critic_question(exchange.question)}
    results = {name: exchange.last_result(name) for name in asked}
    wanted = [(name, {"question": text}) for name, text in asked.items()
              if results[name] is None]
    if wanted:
        return calls_turn(wanted, request=request)
    researcher, critic = results[ASK_RESEARCHER], results[ASK_CRITIC]
    assert researcher is not None and critic is not None
    return text_turn(planner_answer(_said(researcher), _said(critic)), request=request)


def research_team_agents() -> list[Agent]:
    """The planner (``research-team``) and its two sub-agents, each with the team's script."""
    researcher = Agent(RESEARCHER, RESEARCHER_INSTRUCTIONS, script=team_script)
    critic = Agent(CRITIC, CRITIC_INSTRUCTIONS, script=team_script)
    planner = Agent(NAME, PLANNER_INSTRUCTIONS, [researcher.as_tool(), critic.as_tool()],
                    script=team_script)
    return [planner, researcher, critic]
