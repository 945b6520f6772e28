"""Run an eval: every case (and each repetition) as a real run, at most ``concurrency`` at a
time, checked by Pydantic Evals with the case's evaluators, into an :class:`EvalReport`.

Each run's request id is made of the eval's id, the case's place in the dataset and the
repetition: the eval asked again with the same id (after its own process died, say) finds the
runs it started instead of starting them again, so no case is run, paid for or counted twice.
A case with a cassette is replayed in process against its recording, whatever the target.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_evals import Case, Dataset, increment_eval_metric, set_eval_attribute
from pydantic_evals.reporting import EvaluationReport, ReportCase, ReportCaseFailure

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.config.settings import Settings
from ackloop.domain.cost import Spend, price
from ackloop.domain.eval_reports import (
    CaseResult,
    CheckResult,
    EvalReport,
    case_score,
    summarize,
)
from ackloop.domain.records import StepDecision
from ackloop.evals.cases import EvalDataset, EvalInputs
from ackloop.evals.cassette import Cassette, CassetteModel, CassetteToolbox
from ackloop.evals.checks import Status
from ackloop.evals.facts import RunFacts, run_facts
from ackloop.evals.judge import JUDGE_SPEND
from ackloop.evals.matchers import answer_diff
from ackloop.evals.targets import InProcessTarget, Target, drive

DEFAULT_CONCURRENCY = 8
DEFAULT_TIMEOUT = 300.0


def new_eval_id() -> str:
    return f"ev-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


@dataclass
class EvalRunner:
    """Runs datasets against ``target`` (None: in process, ``agents`` played by ``model``).

    ``agents``: the catalog the in-process engine and replays use (the deployment's agents
    for a replay: the recording's decisions are played against today's instructions and
    tools). ``model``: the in-process model (a script or a client; None: each agent's own
    script)."""

    target: Target | None = None
    agents: list[Agent] | None = None
    model: Any = None
    settings: Settings | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    repeat: int = 1
    timeout: float = DEFAULT_TIMEOUT
    on_case: Callable[[CaseResult], None] | None = None

    async def run(self, dataset: EvalDataset, *, eval_id: str | None = None,
                  source: str = "") -> EvalReport:
        if self.concurrency < 1 or self.repeat < 1:
            raise ValueError("concurrency and repeat are at least 1")
        eval_id = eval_id or new_eval_id()
        expanded = self._expanded(dataset)
        judged, spent = JUDGE_SPEND.calls, JUDGE_SPEND.cost.usd
        started = time.time()

        async def task(inputs: EvalInputs) -> Any:
            return await self._case(eval_id, inputs)

        report = await expanded.evaluate(task, name=dataset.name or "eval",
                                         max_concurrency=self.concurrency, progress=False)
        finished = time.time()
        cases = _results(report, self.repeat)
        own = self._own_spend()
        priced = price(own)  # its reads, writes and messages; it serves no request
        summary = summarize(cases, eval_cost_usd=JUDGE_SPEND.cost.usd - spent
                            + priced.firestore_usd + priced.pubsub_usd,
                            judge_calls=JUDGE_SPEND.calls - judged,
                            wall_seconds=round(finished - started, 3))
        summary = summary.model_copy(update={
            "eval_firestore_reads": own.firestore_reads,
            "eval_firestore_writes": own.firestore_writes,
            "eval_pubsub_bytes": own.pubsub_bytes})
        return EvalReport(
            eval_id=eval_id, name=dataset.name or "eval", dataset=source,
            target=self.target.label if self.target is not None else "in process",
            repeat=self.repeat, concurrency=self.concurrency,
            started_at=started, finished_at=finished, summary=summary, cases=cases)

    def _own_spend(self) -> Spend:
        """The target's count of what the eval itself read, wrote and published."""
        spent = getattr(self.target, "spent", None)
        return spent() if callable(spent) else Spend(requests=0)

    def _expanded(self, dataset: EvalDataset) -> EvalDataset:
        """One case per repetition, its inputs keyed by its place (the run's request id), and
        a ``Status`` check on each case that names none."""
        cases = []
        for index, case in enumerate(dataset.cases):
            # Any: pydantic-evals 2.71 widened what a case's evaluators may be (and its list
            # is invariant), 2.62 did not; both take these.
            evaluators: list[Any] = list(case.evaluators)
            if not any(isinstance(e, Status) for e in [*evaluators, *dataset.evaluators]):
                evaluators.insert(0, Status())
            name = case.name or f"case-{index + 1}"
            for rep in range(1, self.repeat + 1):
                inputs = case.inputs.model_copy(update={"run_key": f"{index:04d}-{rep}"})
                cases.append(Case(name=f"{name} [{rep}/{self.repeat}]" if self.repeat > 1
                                  else name, inputs=inputs, metadata=case.metadata,
                                  expected_output=case.expected_output, evaluators=evaluators))
        return Dataset[EvalInputs, Any, Any](name=dataset.name, cases=cases,
                                             evaluators=list(dataset.evaluators))

    async def _case(self, eval_id: str, inputs: EvalInputs) -> Any:
        request_id = f"{eval_id}-{inputs.run_key}"
        set_eval_attribute("question", inputs.question)
        set_eval_attribute("agent", inputs.agent)
        if inputs.cassette is not None:
            target, decisions = self._replay(inputs.cassette)
            set_eval_attribute("replay", True)
        elif self.target is not None:
            target, decisions = self.target, None
        else:
            target, decisions = self._in_process(self._registry(), self.model), None
        view = await drive(target, inputs, request_id, self.timeout, decisions)
        facts = run_facts(view)
        set_eval_attribute("run", dataclasses.asdict(facts))
        set_eval_attribute("link", target.link(facts.run_id))
        for name in ("cost_usd", "model_calls", "tool_calls", "wall_seconds"):
            increment_eval_metric(name, getattr(facts, name))
        return _said(facts)

    def _registry(self) -> AgentRegistry:
        if self.agents is None:
            raise ValueError("an eval in process needs the agents (--agents, or "
                             "ACKLOOP_AGENTS)")
        return AgentRegistry(self.agents)

    def _in_process(self, agents: AgentRegistry, model: Any) -> InProcessTarget:
        from ackloop.testing.agent_tester import AgentTester

        tester = AgentTester(list(agents), model=model, settings=self.settings)
        return InProcessTarget(deps=tester.deps, loop=tester.loop)

    def _replay(self, cassette: Cassette) -> tuple[Target, Any]:
        """The engine in process, its model and tools the recording's."""
        registry = self._registry()
        paths: dict[str, str] = {}
        holder: list[InProcessTarget] = []
        diverged: dict[str, str] = {}

        async def path_of(run_id: str) -> str:
            if run_id not in paths:
                run = await holder[0].deps.store.runs.get_run(run_id)
                if run is None or run.parent_run_id is None:
                    paths[run_id] = ""
                else:
                    above = await path_of(run.parent_run_id)
                    paths[run_id] = f"{above}/{run.parent_step}" if above else str(
                        run.parent_step)
            return paths[run_id]

        replayed = []
        for agent in registry:
            double = copy.copy(agent)
            double.tools = CassetteToolbox(agent.tools, cassette, path_of, diverged)
            replayed.append(double)

        def instructions(name: str) -> str | None:
            return registry.get(name).instructions if name in registry else None

        model = CassetteModel(cassette, path_of, instructions, diverged)
        target = self._in_process(AgentRegistry(replayed), model)
        holder.append(target)

        def decisions(path: str, step: str) -> StepDecision | None:
            recorded = cassette.runs.get(path)
            call = recorded.call(step) if recorded is not None else None
            if call is None or call.decision is None:
                return None
            return StepDecision.model_validate(call.decision)

        return target, decisions


def _said(facts: RunFacts) -> Any:
    result = facts.result()
    return "" if result is None else result


def _results(report: EvaluationReport[Any, Any, Any], repeat: int) -> list[CaseResult]:
    found = [_case_result(c, repeat) for c in report.cases]
    found += [_failure(f, repeat) for f in report.failures]
    return sorted(found, key=lambda c: (c.run_id is None, c.name, c.repetition))


def _name(name: str, repeat: int) -> tuple[str, int]:
    if repeat > 1 and name.endswith("]") and " [" in name:
        base, _, rep = name.rpartition(" [")
        return base, int(rep.split("/")[0])
    return name, 1


def _case_result(case: ReportCase[Any, Any, Any], repeat: int) -> CaseResult:
    checks = [CheckResult(name=n, kind="assertion", value=bool(r.value),
                          reason=_reason(n, bool(r.value), r.reason, case))
              for n, r in case.assertions.items()]
    checks += [CheckResult(name=n, kind="score", value=float(r.value), reason=r.reason)
               for n, r in case.scores.items()]
    checks += [CheckResult(name=n, kind="label", value=str(r.value), reason=r.reason)
               for n, r in case.labels.items()]
    checks += [CheckResult(name=f.name, kind="assertion", value=False,
                           reason=f"the check failed to run: {f.error_message}")
               for f in case.evaluator_failures]
    run = case.attributes.get("run") or {}
    name, rep = _name(case.name, repeat)
    return CaseResult(
        name=name, repetition=rep, run_id=run.get("run_id"), link=case.attributes.get("link"),
        agent=run.get("agent") or case.attributes.get("agent", ""),
        question=case.attributes.get("question", ""), status=run.get("status"),
        answer=case.output, passed=not any(c.failed for c in checks),
        score=case_score(checks, None), checks=checks,
        trajectory=[_label(c) for c in run.get("calls") or []],
        cost_usd=float(run.get("cost_usd", 0.0)), model_calls=int(run.get("model_calls", 0)),
        tool_calls=int(run.get("tool_calls", 0)),
        wall_seconds=float(run.get("wall_seconds", 0.0)),
        replay=bool(case.attributes.get("replay")))


def _reason(name: str, passed: bool, reason: str | None,
            case: ReportCase[Any, Any, Any]) -> str | None:
    """A check's reason; for a failed comparison with the expected answer that gave none
    (``EqualsExpected``), how the answer differs from it."""
    if passed or reason is not None or not name.startswith("EqualsExpected"):
        return reason
    return answer_diff(case.expected_output, case.output)


def _label(call: dict[str, Any]) -> str:
    from ackloop.evals.facts import Call

    return Call(**call).label()


def _failure(failure: ReportCaseFailure[Any, Any, Any], repeat: int) -> CaseResult:
    name, rep = _name(failure.name, repeat)
    inputs = failure.inputs
    return CaseResult(name=name, repetition=rep, agent=getattr(inputs, "agent", ""),
                      question=getattr(inputs, "question", ""), error=failure.error_message,
                      replay=getattr(inputs, "cassette", None) is not None)
