"""What the ledger scheduled: the only step messages the engine executes.

A step message is a request to run a step the run's own ledger (its step records) scheduled;
the message itself is not trusted beyond naming it:

- a tool step runs the call that the model step of its turn *committed* at its index: the
  message must be exactly that model step's outbox entry for it (run, turn, index, call count,
  name, args, id, agent, usage), or it is refused;
- the model step of turn 0 is scheduled by the run itself; the model step of a later turn by
  the previous model step, which either sent it (its answer did not validate and the model is
  told why) or fanned out tool steps that have all completed (the join). Its usage, which the
  budgets are checked against, is the ledger's, never the message's.

A refused message is acknowledged and recorded as poison (:class:`Unscheduled`); nothing is
claimed or executed for it, and its run is left alone. The sweeper rebuilds the same messages
from the same ledger (:func:`scheduled_model_message`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ackloop.domain.errors import PermanentError
from ackloop.domain.keys import StepKey
from ackloop.domain.records import Outgoing, StepRecord, StepStatus
from ackloop.domain.wire import ModelStepMessage, ToolStepMessage
from ackloop.engine.outbox_entries import after_tools, first_step


class Unscheduled(PermanentError):
    """A step message the run's ledger did not schedule: acknowledged, recorded, not run."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="unscheduled_step")


def committed_tool_message(model_step: StepRecord | None, message: ToolStepMessage
                           ) -> ToolStepMessage:
    """The tool step message the model step of ``message.turn`` committed at ``message.index``.

    Raises :class:`Unscheduled` unless ``message`` is exactly that message.
    """
    where = f"run {message.run_id} turn {message.turn}"
    if model_step is None or model_step.status is not StepStatus.COMPLETED:
        raise Unscheduled(f"{where}: its model step has not completed, so it made no call")
    key = str(StepKey.tool(message.turn, message.index))
    entry = next((o for o in model_step.outbox
                  if o.topic == "tool_steps" and o.target_step == key), None)
    if entry is None:
        raise Unscheduled(f"{where}: the model made no call at index {message.index}")
    committed = ToolStepMessage.model_validate(entry.data)
    if committed != message:
        differs = sorted(name for name in ToolStepMessage.model_fields
                         if getattr(committed, name) != getattr(message, name))
        raise Unscheduled(f"{where} call {message.index}: the message differs from the call "
                          f"the model step committed ({', '.join(differs)})")
    return committed


def scheduled_model_message(run_id: str, turn: int, steps: Mapping[str, StepRecord]
                            ) -> Outgoing | None:
    """The message of the model step of ``turn`` as the ledger scheduled it, or None if the
    ledger has not scheduled that turn (yet, or ever). ``steps``: the run's step records by
    key; the previous turn's are enough."""
    if turn == 0:
        return first_step(run_id)
    previous = steps.get(str(StepKey.model(turn - 1)))
    if previous is None or previous.status is not StepStatus.COMPLETED:
        return None
    target = str(StepKey.model(turn))
    direct = [o for o in previous.outbox if o.target_step == target]
    if direct:  # the model was told to try again (a structured answer that did not validate)
        return direct[0]
    tools = [o for o in previous.outbox if o.topic == "tool_steps"]
    if tools and all(_done(steps.get(str(o.target_step))) for o in tools):
        return after_tools(ToolStepMessage.model_validate(tools[0].data))
    return None


def scheduled_model_step(message: ModelStepMessage, steps: Mapping[str, StepRecord]
                         ) -> ModelStepMessage:
    """``message`` as the ledger scheduled it (its usage is the ledger's).

    Raises :class:`Unscheduled` when the ledger has not scheduled that turn."""
    scheduled = scheduled_model_message(message.run_id, message.turn, steps)
    if scheduled is None:
        raise Unscheduled(f"run {message.run_id}: turn {message.turn} was not scheduled "
                          f"(the previous turn did not ask for it, or its tools have not all "
                          f"completed)")
    return ModelStepMessage.model_validate(scheduled.data)


def _done(step: StepRecord | None) -> bool:
    return step is not None and step.status is StepStatus.COMPLETED
