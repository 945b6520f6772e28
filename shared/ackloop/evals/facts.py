"""What a run did, as an eval's checks read it: the answer, the calls, the children, the spend.

Every target (the in-process engine, the local stack, a deployment's HTTP API) hands the same
thing: the run's view as ``GET /runs/{run_id}`` answers it (:class:`ackloop.api.models.RunView`),
and the view of each child run under ``child_views``. :func:`run_facts` reads those views into
:class:`RunFacts`, one pure function for every target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ViewTree = dict[str, Any]
"""A run's view (``GET /runs/{run_id}`` as JSON) with ``child_views``: ``{step: ViewTree}``."""


@dataclass(frozen=True)
class Call:
    """One tool call of the run or of a run below it: what the model asked, what came back."""

    name: str
    args: dict[str, Any]
    step: str
    """The tool step's key (``0001-tool-000``)."""
    run: str = ""
    """Where the run that made it sits in the tree: ``""`` for the case's run, else the keys
    of the steps that started each child run on the way down, joined by ``/``."""
    agent: str = ""
    response: dict[str, Any] | None = None
    """``{"result": ...}`` or ``{"error": ...}``; None when the call has no result recorded."""

    def label(self) -> str:
        """``name(args)`` in one line, arguments as JSON."""
        import json

        args = json.dumps(self.args, ensure_ascii=False, sort_keys=True, default=str)
        where = f" [{self.run}]" if self.run else ""
        return f"{self.name}({args}){where}"


@dataclass(frozen=True)
class RunFacts:
    """A case's run, and what it and its child runs did."""

    run_id: str
    agent: str
    status: str
    stop_reason: str | None
    answer: str | None
    output: Any
    error: str | None
    calls: list[Call]
    """Every tool call in the order its steps ran: the run's own, each child run's right
    after the call that started it."""
    children: list[str]
    """The agents of the child runs, in the order they were started (the whole tree)."""
    handoffs: list[str]
    """The agents the conversation was handed to, in order."""
    model_calls: int
    tool_calls: int
    cost_usd: float
    tokens: int
    wall_seconds: float
    approvals: list[str] = field(default_factory=list)
    """The tools whose calls waited for a person's decision, and how each was decided
    (``send_refund: approve``)."""

    @property
    def answered(self) -> bool:
        return self.status == "completed" and self.stop_reason in ("answered", "final_tool")

    def result(self) -> Any:
        """What the answer checks look at: the structured output when the agent has one,
        else the answer's text."""
        return self.output if self.output is not None else self.answer


def run_facts(view: ViewTree) -> RunFacts:
    """The facts of a run from its view tree."""
    calls: list[Call] = []
    children: list[str] = []
    handoffs: list[str] = []
    approvals: list[str] = []
    _walk(view, "", calls, children, handoffs, approvals)
    usage = view.get("usage") or {}
    cost = view.get("cost") or {}
    created, finished = view.get("created_at"), view.get("finished_at")
    return RunFacts(
        run_id=str(view.get("run_id", "")),
        agent=str(view.get("agent", "")),
        status=str(view.get("status", "")),
        stop_reason=view.get("stop_reason"),
        answer=view.get("answer"),
        output=view.get("output"),
        error=view.get("error"),
        calls=calls,
        children=children,
        handoffs=handoffs,
        model_calls=int(usage.get("model_calls", 0)),
        tool_calls=int(usage.get("tool_calls", 0)),
        cost_usd=float(cost.get("usd", 0.0)),
        tokens=int(usage.get("total_tokens", 0)),
        wall_seconds=round(finished - created, 3) if finished and created else 0.0,
        approvals=approvals,
    )


def _walk(view: ViewTree, where: str, calls: list[Call], children: list[str],
          handoffs: list[str], approvals: list[str]) -> None:
    steps = sorted(view.get("steps") or [], key=lambda s: s["key"])
    asked: dict[int, list[dict[str, Any]]] = {
        s["turn"]: list((s.get("result") or {}).get("calls") or [])
        for s in steps if s["kind"] == "model"}
    below: dict[str, ViewTree] = view.get("child_views") or {}
    started = {c["step"]: c.get("agent", "") for c in view.get("children") or []}
    for step in steps:
        if step["kind"] != "tool":
            continue
        wanted = asked.get(step["turn"], [])
        call = wanted[step["index"]] if step["index"] < len(wanted) else {}
        result = step.get("result") or {}
        response = result.get("response") or {}
        calls.append(Call(name=step["name"], args=dict(call.get("args") or {}), step=step["key"],
                          run=where, agent=str(view.get("agent", "")),
                          response=response or None))
        response = result.get("response") or {}
        if response.get("handoff"):
            handoffs.append(str(response["handoff"]))
        decision = step.get("decision")
        if isinstance(decision, dict) and decision.get("decision") in ("approve", "reject"):
            approvals.append(f"{step['name']}: {decision['decision']}")
        if step["key"] in started:
            children.append(started[step["key"]])
            child = below.get(step["key"])
            if child is not None:
                path = f"{where}/{step['key']}" if where else step["key"]
                _walk(child, path, calls, children, handoffs, approvals)
