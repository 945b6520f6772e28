"""Hand-offs (``Agent.as_handoff``): a call hands the conversation to another agent, whose turn
the run's next model step is (its instructions, its tools, the whole conversation so far), and
whose the conversation's later runs are, until an agent hands it on again. In process, with the
real dispatch and a scripted model that plays each agent from its request."""

from __future__ import annotations

from typing import Any

from ackloop.agents.agent import Agent
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import calls_turn, text_turn
from tests.engine.test_children import _responses, team_loop


class Desk:
    """triage hands every question to the writer; the writer answers, and hands back to
    triage when asked to ("back"). Records which agent got each request, with what tools and
    instructions."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, list[str]]] = []

    def __call__(self, request: ModelRequest) -> ModelTurn:
        agent = request.agent or "default"
        self.seen.append((agent, request.system_instruction,
                          sorted(str(t["name"]) for t in request.tools)))
        last = request.contents[-1]
        asked = next((p["text"] for p in last.get("parts", []) if "text" in p), "")
        if agent == "triage":
            if "transfer_to_writer" in _responses(request) and last["role"] == "user" and not asked:
                return text_turn("triage: the writer has it", request=request)
            if asked == "thanks":
                return text_turn("triage: you are welcome", request=request)
            return calls_turn([("transfer_to_writer", {"note": "a poem"})], request=request)
        if asked == "back":
            return calls_turn([("transfer_to_triage", {})], request=request)
        return text_turn(f"writer: a poem about {asked or 'that'}", request=request)


def desk_agents() -> list[Agent]:
    writer_stub = Agent("writer", "Write poems.")
    triage_stub = Agent("triage", "Route questions.")
    triage = Agent("triage", "Route questions.", [writer_stub.as_handoff()])
    writer = Agent("writer", "Write poems.", [triage_stub.as_handoff()])
    return [triage, writer]


async def ask(loop: Any, request_id: str, text: str, conversation_id: str | None = None,
              agent: str = "default") -> Any:
    await loop.submit(QueryMessage(request_id=request_id, text=text, agent=agent,
                                   conversation_id=conversation_id))
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id_for_request(request_id))
    assert run is not None and run.status is RunStatus.COMPLETED, run
    return run


async def test_a_hand_off_makes_the_next_turn_the_other_agents_with_its_tools() -> None:
    desk = Desk()
    loop = team_loop(desk_agents(), desk)  # type: ignore[arg-type]
    run = await ask(loop, "first", "the sea", agent="triage")

    assert run.answer == "writer: a poem about that"
    assert [(a, i) for a, i, _ in desk.seen] == [("triage", "Route questions."),
                                                ("writer", "Write poems.")]
    assert desk.seen[1][2] == ["transfer_to_triage"]  # the writer's tools, not triage's
    steps = {s.key: s for s in await loop.deps.store.steps.list_steps(run.run_id)}
    assert steps["0000-tool-000"].result is not None
    assert steps["0000-tool-000"].result["response"]["handoff"] == "writer"
    assert steps["0001-model"].result is not None
    assert steps["0001-model"].result["agent"] == "writer"
    assert (run.agent, run.handed_to) == ("triage", "writer")


async def test_the_conversations_later_runs_are_the_agents_that_took_over_until_it_hands_back(
) -> None:
    desk = Desk()
    loop = team_loop(desk_agents(), desk)  # type: ignore[arg-type]
    first = await ask(loop, "first", "the sea", agent="triage")
    conversation = first.conversation_id

    second = await ask(loop, "second", "the moon", conversation)  # names no agent
    assert second.agent == "writer" and second.answer == "writer: a poem about the moon"

    third = await ask(loop, "third", "back", conversation)  # the writer hands back
    assert (third.agent, third.handed_to) == ("writer", "triage")
    fourth = await ask(loop, "fourth", "thanks", conversation)
    assert fourth.agent == "triage" and fourth.answer == "triage: you are welcome"

    named = await ask(loop, "fifth", "the stars", conversation, agent="writer")
    assert named.agent == "writer"  # a run that names its agent gets it
    conv = await loop.deps.store.runs.get_conversation(conversation)
    assert conv is not None and conv.agent == "triage" and conv.run_count == 5
