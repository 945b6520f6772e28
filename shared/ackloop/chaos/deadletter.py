"""The dead-letter path end to end, on the live stack.

A run whose first model step keeps failing (the model server answers 500 to everything) uses up
the subscription's delivery attempts; Pub/Sub forwards the push message to the dead-letter
topic, the dead-letter function records it and fails the run with the cause. The cause is then
fixed (faults cleared) and :func:`ackloop.redrive.redrive` re-drives it: the run must complete
with the fault-free answer, its model step answered exactly once, and a second redrive must
find nothing to do.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.chaos.checks import Reference, RefKey, normalize_answer, roles, tool_outcomes
from ackloop.chaos.evidence import model_evidence
from ackloop.chaos.stackup import ChaosStack
from ackloop.chaos.workflow import submit
from ackloop.chaos.workload import BY_NAME
from ackloop.clock import SystemClock
from ackloop.records import RunRecord
from ackloop.redrive import redrive
from ackloop.store import AgentStore

TEMPLATE = "ip"
REF = "dl-0000"


@dataclass
class DeadLetterResult:
    """What the dead-letter phase saw."""

    dead_lettered: bool = False
    seconds_to_dead_letter: float | None = None
    failed_with: str | None = None
    dead_letter_cause: str | None = None
    redriven: list[str] = field(default_factory=list)
    completed_after_redrive: bool = False
    answer_ok: bool = False
    model_answers_per_turn: dict[int, int] = field(default_factory=dict)
    transcript_ok: bool = False
    second_redrive: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        # A second redrive may still find a copy of the dead letter (Pub/Sub forwards at least
        # once); it must not publish anything.
        return (self.dead_lettered and self.completed_after_redrive and self.answer_ok
                and self.transcript_ok and "redriven" not in self.second_redrive
                and not self.problems
                and all(n == 1 for n in self.model_answers_per_turn.values()))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


async def _wait_run(store: AgentStore, run_id: str, want: str, timeout_s: float
                    ) -> RunRecord | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = await store.get_run(run_id)
        if run is not None and run.status.value == want:
            return run
        await asyncio.sleep(0.2)
    return None


async def dead_letter_phase(stack: ChaosStack, references: dict[RefKey, Reference],
                            tag: str) -> DeadLetterResult:
    """Run the scenario of the module docstring."""
    result = DeadLetterResult()
    store = stack.store()
    publisher = PubSubPublisher(stack.settings.project_id)
    stack.set_dead_letter_attempts(stack.config.dead_letter_attempts)
    stack.tool_faults(nws_error_rate=0.0, ipapi_timeout_rate=0.0)
    stack.model_reset()
    stack.model_faults("500*1000")
    began = time.time()
    try:
        item = await submit(publisher, stack.settings.queries_topic, BY_NAME[TEMPLATE], REF, tag)
        failed = await _wait_run(store, item.run_id, "failed", 90.0)
        if failed is None:
            result.problems.append("the run was not failed by the dead-letter path in 90 s")
            return result
        result.seconds_to_dead_letter = round(time.time() - began, 1)
        result.failed_with = failed.error
        letters = [s.data for s in await store.list_dead_letters()
                   if s.data.get("run_id") == item.run_id]
        result.dead_lettered = bool(letters) and (failed.error or "").startswith("dead_lettered")
        result.dead_letter_cause = str(letters[0].get("cause")) if letters else None
        stack.model_reset()  # the cause is fixed
        done = await redrive(store, publisher, stack.settings, SystemClock(), run_id=item.run_id)
        result.redriven = [r.outcome for r in done]
        run = await _wait_run(store, item.run_id, "completed", 60.0)
        result.completed_after_redrive = run is not None
        if run is not None:
            steps = await store.list_steps(item.run_id)
            transcript = await store.load_transcript(run.conversation_id)
            expected = references.get((TEMPLATE, tool_outcomes(steps)))
            result.answer_ok = (expected is not None
                                and normalize_answer(run.answer) == expected.answer)
            result.transcript_ok = expected is not None and roles(transcript) == expected.roles
            evidence = model_evidence(stack.ledger_path, {REF})
            result.model_answers_per_turn = {s.turn: evidence.answered[(REF, s.turn)]
                                             for s in steps if s.kind == "model"}
        await asyncio.sleep(2.0)  # let any stray redelivery land before the second redrive
        again = await redrive(store, publisher, stack.settings, SystemClock(), run_id=item.run_id)
        result.second_redrive = [r.outcome for r in again]
    finally:
        stack.model_reset()
        stack.set_dead_letter_attempts(stack.config.max_delivery_attempts)
        publisher.close()
    return result
