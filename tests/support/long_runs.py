"""A long run written straight into a store: the documents a run of many turns leaves, made
from a short run's own, so a test that reads a long run need not run its hundreds of steps."""

from __future__ import annotations

import uuid

from ackloop.docdb.base import Write
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import StepRecord
from ackloop.store import AgentStore

_BATCH = 100
"""Documents a commit writes (Firestore takes at most 500 writes in one)."""


def _turn(step: StepRecord, turn: int, *, last: bool) -> StepRecord:
    """``step`` (a model step or a tool step of the template's first turn) moved to ``turn``."""
    key = StepKey.model(turn) if step.kind == "model" else StepKey.tool(turn, step.index)
    outbox = [] if last else [o.model_copy(update={"target_step": str(StepKey.tool(turn, 0))})
                              for o in step.outbox]
    return step.model_copy(update={"key": str(key), "turn": turn, "outbox": outbox})


async def copy_longer(store: AgentStore, template_id: str, turns: int) -> str:
    """A new run, completed, of ``turns`` tool turns and their ``2 * turns + 1`` steps, copied
    from ``template_id``: a completed run of one tool call a turn (at least two turns) whose
    first turn's model and tool steps stand for every turn's and whose last model step
    answers. Returns the new run's id."""
    run = await store.runs.get_run(template_id)
    assert run is not None and run.status.terminal, run
    steps = await store.steps.list_steps(template_id)
    model, tool, answer = steps[0], steps[1], steps[-1]
    assert (model.kind, tool.kind, answer.kind) == ("model", "tool", "model"), steps
    request_id = f"long-{uuid.uuid4().hex[:12]}"
    run_id = run_id_for_request(request_id)
    long = [step for turn in range(turns) for step in (_turn(model, turn, last=False),
                                                       _turn(tool, turn, last=False))]
    long.append(_turn(answer, turns, last=True))
    writes = [Write("create", store.run_path(run_id), run.model_copy(update={
        "run_id": run_id, "request_id": request_id, "conversation_id": run_id,
        "steps_total": len(long)}).to_doc())]
    writes += [Write("create", store.step_path(run_id, s.key), s.to_doc()) for s in long]
    for start in range(0, len(writes), _BATCH):
        await store.db.commit(writes[start:start + _BATCH])
    return run_id
