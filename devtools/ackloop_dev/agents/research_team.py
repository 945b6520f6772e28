"""``research-team``: a planner that calls two sub-agents in parallel and hands off to a writer,
to try agents that call agents and hand-offs.

The planner (the agent ``research-team``) calls ``ask_researcher`` and ``ask_critic`` in one
turn: each call is a durable child run of that agent (:meth:`~ackloop.agents.agent.Agent.as_tool`,
:mod:`ackloop.engine.children`), and the planner's calls wait for their ends holding nothing.
Once both have answered (or failed), it hands the conversation to ``writer``
(:meth:`~ackloop.agents.agent.Agent.as_handoff`): the run's next turn is the writer's, in the same
run and conversation, and the writer answers from what the researcher and the critic said (the
results of those calls, earlier in the contents). The run records the hand-off (``handed_to``),
and so does its conversation: its later runs that name no agent are the writer's.
``researcher``, ``critic`` and ``writer`` are agents of their own (no tools), internal: a query
may not name them (they answer only the planner's calls and take its hand-off), though a
conversation the planner handed to the writer goes on with the writer.

Offline the four are played by one script, :func:`team_script`, from what each request shows:
the agent it names (``request.agent`` in process; over the fake Gemini server's REST body, the
agent whose instructions the request carries), the question, and the results so far. It keeps
no state and draws nothing at random, so a redelivered step gets the same turn.
:func:`team_answer` is the answer the offline team gives a question.
"""

from __future__ import annotations

from ackloop.agents.agent import Agent
from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.transcript import ToolResult, read_exchange
from ackloop.model.turns import calls_turn, text_turn

NAME = "research-team"
RESEARCHER = "researcher"
CRITIC = "critic"
WRITER = "writer"

PLANNER_INSTRUCTIONS = (
    "You plan a piece of research. Ask the researcher for the facts and the critic for what "
    "could be wrong, both at once, then hand the conversation off to the writer, who writes "
    "the answer from what they said.")
RESEARCHER_INSTRUCTIONS = (
    "You are a researcher. Answer the question with the facts that bear on it, briefly.")
CRITIC_INSTRUCTIONS = (
    "You are a critic. Say briefly what could be wrong with, or is missing from, the question "
    "or the plan it describes.")
WRITER_INSTRUCTIONS = (
    "You are a writer. Write the final answer to the user's question from what the researcher "
    "and the critic found, as the conversation shows it: the facts first, then the caveats.")

ASK_RESEARCHER = f"ask_{RESEARCHER}"
ASK_CRITIC = f"ask_{CRITIC}"
TO_WRITER = f"transfer_to_{WRITER}"
HANDOFF_NOTE = "Write the answer from the researcher's and the critic's findings above."
"""The planner's note when it hands the conversation to the writer (the call's ``note``)."""
_TEAM = (NAME, RESEARCHER, CRITIC, WRITER)
_BY_INSTRUCTIONS = {PLANNER_INSTRUCTIONS: NAME, RESEARCHER_INSTRUCTIONS: RESEARCHER,
                    CRITIC_INSTRUCTIONS: CRITIC, WRITER_INSTRUCTIONS: WRITER}


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


def writer_answer(researcher: str, critic: str) -> str:
    """The writer's offline answer, from what the researcher and the critic said (each one's
    answer, or why it gave none)."""
    return f"What we found: {researcher}\nWhat to keep in mind: {critic}"


def writer_follow_up(question: str, researcher: str, critic: str) -> str:
    """The writer's offline answer to a later question of the conversation (the findings are
    in an earlier run's part of it): :func:`writer_answer`, headed by the question."""
    written = writer_answer(researcher, critic)
    return f"On {_topic(question)!r}, from the findings so far:\n{written}"


def writer_without_findings(question: str) -> str:
    """The writer's offline answer when the conversation holds no findings (asked directly)."""
    return (f"Nothing to write from on {_topic(question)!r} yet: ask {NAME} to research it "
            "first.")


def team_answer(question: str) -> str:
    """The exact answer the offline team gives the user's ``question`` (a run of
    ``research-team`` whose two sub-agents answered): the writer's, from their answers."""
    return writer_answer(researcher_answer(researcher_question(question)),
                         critic_answer(critic_question(question)))


def _topic(question: str) -> str:
    """The user's words in a sub-agent's question (the whole question when it is not the
    planner's)."""
    _, colon, topic = question.partition(": ")
    return (topic if colon else question).strip()[:200]


def agent_of(request: ModelRequest) -> str:
    """Which of the team the request is for: the agent it names, else the one whose
    instructions it carries, else the planner when it offers the sub-agents' tools (else the
    researcher)."""
    if request.agent in _TEAM:
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


def _findings(contents: list[JsonDict]) -> tuple[ToolResult | None, ToolResult | None]:
    """The latest results of ``ask_researcher`` and ``ask_critic`` anywhere in the
    conversation (an earlier run's included), or None for a call it does not hold."""
    found: dict[str, ToolResult] = {}
    for content in contents:
        for part in content.get("parts") or []:
            response = part.get("function_response")
            if isinstance(response, dict) and (name := response.get("name")) in (
                    ASK_RESEARCHER, ASK_CRITIC):
                found[str(name)] = ToolResult(str(name), response.get("response") or {})
    return found.get(ASK_RESEARCHER), found.get(ASK_CRITIC)


def _writer_turn(request: ModelRequest) -> ModelTurn:
    """The writer answers from the findings of this run (the planner's calls before it handed
    over); on a later question of the conversation, from the findings so far."""
    exchange = read_exchange(request.contents)
    researcher, critic = (exchange.last_result(ASK_RESEARCHER),
                          exchange.last_result(ASK_CRITIC))
    if researcher is not None and critic is not None:
        return text_turn(writer_answer(_said(researcher), _said(critic)), request=request)
    researcher, critic = _findings(request.contents)
    if researcher is not None and critic is not None:
        return text_turn(writer_follow_up(exchange.question, _said(researcher), _said(critic)),
                         request=request)
    return text_turn(writer_without_findings(exchange.question), request=request)


def team_script(request: ModelRequest) -> ModelTurn:
    """The offline model of the whole team (see the module's doc). The planner's turns: both
    sub-agents' calls at once (or the one whose result is missing), then the hand-off to the
    writer; the writer's turn: the answer."""
    exchange = read_exchange(request.contents)
    agent = agent_of(request)
    if agent == RESEARCHER:
        return text_turn(researcher_answer(exchange.question), request=request)
    if agent == CRITIC:
        return text_turn(critic_answer(exchange.question), request=request)
    if agent == WRITER:
        return _writer_turn(request)
    asked = {ASK_RESEARCHER: researcher_question(exchange.question),
             ASK_CRITIC: critic_question(exchange.question)}
    results = {name: exchange.last_result(name) for name in asked}
    wanted = [(name, {"question": text}) for name, text in asked.items()
              if results[name] is None]
    if wanted:
        return calls_turn(wanted, request=request)
    if exchange.last_result(TO_WRITER) is None:
        return calls_turn([(TO_WRITER, {"note": HANDOFF_NOTE})], request=request)
    # The hand-off came back and the turn is still the planner's (the engine did not make it
    # the writer's): the planner writes the answer itself rather than hand off again.
    researcher, critic = results[ASK_RESEARCHER], results[ASK_CRITIC]
    assert researcher is not None and critic is not None
    return text_turn(writer_answer(_said(researcher), _said(critic)), request=request)


def research_team_agents() -> list[Agent]:
    """The planner (``research-team``), its two sub-agents and the writer it hands off to,
    each with the team's script; all but the planner internal."""
    researcher = Agent(RESEARCHER, RESEARCHER_INSTRUCTIONS, script=team_script, internal=True)
    critic = Agent(CRITIC, CRITIC_INSTRUCTIONS, script=team_script, internal=True)
    writer = Agent(WRITER, WRITER_INSTRUCTIONS, script=team_script, internal=True)
    planner = Agent(NAME, PLANNER_INSTRUCTIONS,
                    [researcher.as_tool(), critic.as_tool(),
                     writer.as_handoff("Hand the conversation to the writer once the "
                                       "researcher and the critic have both answered: the "
                                       "writer writes the final answer from what they said.")],
                    script=team_script)
    return [planner, researcher, critic, writer]
