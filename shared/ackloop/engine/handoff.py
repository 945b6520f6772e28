"""Hand-offs: whose turn a model step is, and whose the run is when it ends.

A hand-off's call (``Agent.as_handoff``) runs nothing; its result names the agent that takes
over, and the next model step is that agent's turn (recorded on it, ``agent``). The same rule
says whose turn a model step is (:func:`turn_agent`) and which agent a run ended with
(:func:`ended_with`), whichever way it ends: its last step's commit, or outside a step (a dead
letter, the sweeper, a cancel), so the conversation's next run goes to that agent either way.
"""

from __future__ import annotations

from ackloop.domain.records import RunRecord, StepRecord, StepStatus


def turn_agent(run: RunRecord, turn: int, previous: list[StepRecord]) -> str:
    """The agent whose turn ``turn`` is: the run's at turn 0; then the previous model step's
    (recorded on it when a hand-off made it another agent's), or the one a hand-off call of
    the previous turn handed over to (the last one, in call order)."""
    if turn == 0:
        return run.agent
    model_step = next((s for s in previous if s.kind == "model"), None)
    name = str((model_step.result or {}).get("agent") or run.agent) if model_step else run.agent
    for step in sorted((s for s in previous if s.kind == "tool"), key=lambda s: s.index):
        handed = ((step.result or {}).get("response") or {}).get("handoff")
        if isinstance(handed, str) and handed:
            name = handed
    return name


def ended_with(run: RunRecord, steps: list[StepRecord]) -> str | None:
    """The agent a run ends with, read from its steps as recorded, when a hand-off made it
    another than the run's own (None otherwise): the turn after its last completed one."""
    done = [s for s in steps if s.status is StepStatus.COMPLETED]
    if not done:
        return None
    last = max(s.turn for s in done)
    name = turn_agent(run, last + 1, [s for s in done if s.turn == last])
    return name if name != run.agent else None
