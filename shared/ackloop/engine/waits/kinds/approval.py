"""A call that waits for a person's decision: approve (with edited arguments, maybe) or
reject (``Tool.needs_approval``). Nothing arrives by itself: the decision comes through the
API, the CLI or the inspector, and a notice on the answers topic says one is wanted."""

from __future__ import annotations

from ackloop.domain.jsondict import JsonDict
from ackloop.engine.waits.kind import Wait, WaitKind, call_of, utc
from ackloop.tools.definition import Tool


def _of(tool: Tool, args: JsonDict, now: float) -> Wait | None:
    return Wait(tool, KIND) if tool.needs_approval(args) else None


KIND = WaitKind(
    "approval", clock_runs=False, announced=True, shown_as="approval", of=_of,
    label=lambda waiting: ("waiting for", "a decision"),
    awaits=lambda run_id, waiting: "an approval",
    missed=lambda waiting: "no decision before the deadline",
    told=lambda run_id, key, waiting: [
        f"run {run_id} waits for approval of {call_of(waiting)} at step {key}, until "
        f"{utc(waiting.deadline)}",
        f"  approve: ackloop runs approve {run_id} {key} [--args JSON] [--comment TEXT]",
        f"  reject:  ackloop runs reject {run_id} {key} [--comment TEXT]"],
    timeout=lambda tool: tool.approval_timeout_seconds)
