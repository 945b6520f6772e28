"""Agents that call agents on a stack of real processes on the emulators: the local stack's
``research-team`` planner (:mod:`ackloop_dev.agents.research_team`) asks ``researcher`` and
``critic`` in one turn, each call a durable child run whose end resumes the planner's waiting
call, then hands off to ``writer``, whose turn (in the same run) answers.

- ``ackloop ask --agent research-team`` as a user runs it answers, and both children are in
  Firestore, completed, with their parent named;
- a tool-step process SIGKILLed between creating a child and recording its call's wait (the
  fault point ``tool:after_child``) loses no call and starts no second child;
- the planner's call published again after its child ended changes nothing.

The model is the fake Gemini server playing each agent's offline script from the REST body.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord, RunStatus, StepStatus
from ackloop.engine import children
from ackloop_dev.agents.research_team import (
    CRITIC,
    CRITIC_INSTRUCTIONS,
    NAME,
    PLANNER_INSTRUCTIONS,
    RESEARCHER,
    RESEARCHER_INSTRUCTIONS,
    WRITER,
    WRITER_INSTRUCTIONS,
    critic_answer,
    critic_question,
    researcher_answer,
    researcher_question,
    team_answer,
)
from tests.cli.conftest import Cli
from tests.e2e.test_crashes import _restart_when_killed
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

RESEARCHER_CALL, CRITIC_CALL = "0000-tool-000", "0000-tool-001"
HANDOFF_CALL = "0001-tool-000"
KEYS = ["0000-model", RESEARCHER_CALL, CRITIC_CALL, "0001-model", HANDOFF_CALL, "0002-model"]
AFTER_CHILD = "tool:after_child"
"""The fault point between a child's creation and its call's waiting commit
(:mod:`ackloop_dev.faults`)."""


def _question(tag: str) -> str:
    """A question no other test asks: the fake model's requests are told apart by it."""
    return f"is the {tag} night train to Lisbon worth it?"


def _answer(question: str) -> str:
    return team_answer(question)


async def _children(stack: RunningStack, run: RunRecord) -> list[RunRecord]:
    """Every run of the team's sub-agents whose parent is ``run``, by the agent's name."""
    store = stack.store()
    found = [r for agent in (CRITIC, RESEARCHER)
             for r in await store.recent_runs(limit=200, agent=agent)
             if r.parent_run_id == run.run_id]
    return sorted(found, key=lambda r: r.agent)


async def _assert_answered_by_two_children(stack: RunningStack, run: RunRecord,
                                           question: str) -> list[RunRecord]:
    assert run.status is RunStatus.COMPLETED, run.error
    assert (run.stop_reason, run.answer) == ("answered", _answer(question))
    kids = await _children(stack, run)
    assert [(k.agent, k.status, k.stop_reason, k.parent_run_id, k.parent_step, k.depth)
            for k in kids] == [
        (CRITIC, RunStatus.COMPLETED, "answered", run.run_id, CRITIC_CALL, 1),
        (RESEARCHER, RunStatus.COMPLETED, "answered", run.run_id, RESEARCHER_CALL, 1)]
    critic, researcher = kids
    assert critic.run_id == children.child_run_id(run, CRITIC_CALL)
    assert researcher.run_id == children.child_run_id(run, RESEARCHER_CALL)
    assert critic.answer == critic_answer(critic_question(question))
    assert researcher.answer == researcher_answer(researcher_question(question))
    assert all(k.trace_id == run.trace_id and k.lineage == [NAME] for k in kids)
    return kids


def _model_calls(stack: RunningStack, question: str) -> dict[str, int]:
    """How many requests the fake Gemini server got for each agent of the team about
    ``question`` (told apart by their system instruction)."""
    agents = {PLANNER_INSTRUCTIONS: NAME, RESEARCHER_INSTRUCTIONS: RESEARCHER,
              CRITIC_INSTRUCTIONS: CRITIC, WRITER_INSTRUCTIONS: WRITER}
    counts = dict.fromkeys(agents.values(), 0)
    for body in stack.model_requests():
        if question in json.dumps(body["contents"]):
            instructions = body["systemInstruction"]["parts"][0]["text"]
            counts[agents[instructions]] += 1
    return counts


async def test_ackloop_ask_research_team_answers_from_two_child_runs(
        stack: RunningStack, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tag = uuid.uuid4().hex[:8]
    question, request_id = _question(tag), f"team-{tag}"

    asked = await asyncio.to_thread(Cli(home), "ask", "--agent", NAME, question,
                                    "--request-id", request_id,
                                    "--directory", stack.state.directory)

    run_id = run_id_for_request(request_id)
    run, steps = await stack.wait_run(run_id, timeout=90)
    await _assert_answered_by_two_children(stack, run, question)
    assert [s.key for s in steps] == KEYS
    calls = [s for s in steps if s.kind == "tool"]
    assert [(s.name, s.status) for s in calls] == [
        ("ask_researcher", StepStatus.COMPLETED), ("ask_critic", StepStatus.COMPLETED),
        ("transfer_to_writer", StepStatus.COMPLETED)]
    assert (run.agent, run.handed_to) == (NAME, WRITER)
    # Resumed by its child's end (or, had the child ended before the call recorded its wait,
    # run at once by the waiting commit, which found the event).
    assert all(s.decision is None or s.decision.decision == "received" for s in calls)
    # One paid call per turn: the planner's two turns, one each for the children and the
    # writer (the two children's ends resume their calls together; one of them joins).
    assert _model_calls(stack, question) == {NAME: 2, RESEARCHER: 1, CRITIC: 1, WRITER: 1}
    assert asked.returncode == 0, (asked.stdout, asked.stderr)
    assert asked.stdout.strip() == _answer(question)


async def test_trees_asked_at_once_make_one_model_call_per_turn(stack: RunningStack) -> None:
    """Eight research-team trees at once (each a fan-in of two child runs): every request the
    fake Gemini server received is a model call a run recorded, and each agent's turns are
    called once."""
    tag = uuid.uuid4().hex[:8]
    questions = [_question(f"{tag}-{n}") for n in range(8)]
    run_ids = [stack.ask(q, agent=NAME) for q in questions]
    runs = [(await stack.wait_run(run_id, timeout=120))[0] for run_id in run_ids]
    for run, question in zip(runs, questions, strict=True):
        assert (run.status, run.answer) == (RunStatus.COMPLETED, _answer(question))
        assert _model_calls(stack, question) == {NAME: 2, RESEARCHER: 1, CRITIC: 1, WRITER: 1}
        assert run.usage.model_calls == 5


async def test_a_call_published_again_after_its_child_ended_changes_nothing(
        stack: RunningStack) -> None:
    """The planner's first call's message, published to the tool steps' topic once more after
    the run ended (as a redelivery would bring it): acknowledged, no child started or run
    again, no model called, the run and its steps as they were."""
    tag = uuid.uuid4().hex[:8]
    question = _question(tag)
    run_id = stack.ask(question, agent=NAME)
    run, steps = await stack.wait_run(run_id, timeout=90)
    kids = await _assert_answered_by_two_children(stack, run, question)
    (message,) = [o for o in steps[0].outbox
                  if o.topic == "tool_steps" and o.target_step == RESEARCHER_CALL]
    store = stack.store()
    before = (run.model_dump(), [s.model_dump() for s in steps],
              [k.model_dump() for k in kids], _model_calls(stack, question))
    pushed = stack.push_answers("tool_step")

    await asyncio.to_thread(stack.publish, stack.settings.tool_steps_topic,
                            json.dumps(message.data).encode(), run_id=run_id,
                            step=RESEARCHER_CALL)
    deadline = time.monotonic() + 30
    while (answered := stack.push_answers("tool_step") - pushed).total() < 1:
        assert time.monotonic() < deadline, "the call's message was never pushed"
        await asyncio.sleep(0.2)

    assert all(status.startswith("2") for status in answered), answered  # acknowledged
    after_run = await store.get_run(run_id)
    assert after_run is not None
    after = (after_run.model_dump(), [s.model_dump() for s in await store.list_steps(run_id)],
             [k.model_dump() for k in await _children(stack, run)],
             _model_calls(stack, question))
    assert after == before


async def test_a_kill_between_starting_a_child_and_recording_the_wait_starts_one_child(
        fresh_stack: Callable[..., RunningStack], tmp_path: Path) -> None:
    """The tool-step process is SIGKILLed (its whole process group, both calls of the turn
    with it) right after one call created its child run, before it sent the child's first step
    or recorded its wait. Restarted, the redelivered call takes its step over, finds the child
    it started (its id is the call's), sends its first step (never claimed) and waits: one
    child per call, each run once, and the planner answers with both."""
    markers = tmp_path / "markers"
    markers.mkdir()
    stack = fresh_stack(service_env={"tool_step": {
        "ACKLOOP_FAULT_CRASH_AT": AFTER_CHILD, "ACKLOOP_FAULT_MARKER_DIR": str(markers)}})
    question = _question("killed")
    stop = asyncio.Event()
    watcher = asyncio.create_task(_restart_when_killed(stack, "tool_step", stop))
    try:
        run_id = stack.ask(question, agent=NAME)
        run, steps = await stack.wait_run(run_id, timeout=120)
    finally:
        stop.set()
        restarts = await watcher

    assert len(restarts) == 1 and (markers / AFTER_CHILD.replace(":", "_")).exists()
    kids = await _assert_answered_by_two_children(stack, run, question)
    assert [s.key for s in steps] == KEYS
    calls = [s for s in steps if s.kind == "tool"]
    assert all(s.status is StepStatus.COMPLETED for s in calls)
    assert max(s.attempts for s in calls) == 2  # the killed call, taken over once
    # Each child ran once: one model step, one attempt, one model call. (The planner's own
    # model may be asked its last turn twice: the turn's killed calls, delivered again, may
    # each send it while it runs unclaimed; one commit records it.)
    for kid in kids:
        assert [(s.key, s.attempts) for s in await stack.store().list_steps(kid.run_id)] == [
            ("0000-model", 1)]
    called = _model_calls(stack, question)
    assert (called[RESEARCHER], called[CRITIC]) == (1, 1) and called[NAME] >= 2
    # Every run the stack holds is the planner's or one of its two children.
    runs = await stack.store().recent_runs(limit=50)
    assert sorted(r.agent for r in runs) == sorted([NAME, RESEARCHER, CRITIC])
