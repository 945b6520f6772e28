"""Evaluate agents: datasets of cases, each a real run, checked and scored; recorded runs
replayed. ``ackloop eval`` is the command; this is the API beside it::

    from ackloop.evals import EvalRunner, load_dataset

    report = await EvalRunner(agents=my_agents).run(load_dataset("evals/cases.yaml"))
    assert report.passed, report.summary

Running and checking need the ``eval`` extra (``pip install 'ackloop[eval]'``: Pydantic
Evals). The report's model (:mod:`ackloop.domain.eval_reports`), which the API and the inspector
read, and the pure modules (:mod:`~ackloop.evals.facts`, :mod:`~ackloop.evals.matchers`) do
not: the names below load lazily (PEP 562), so importing this package needs nothing extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC: dict[str, str] = {
    "EvalDataset": "cases", "EvalInputs": "cases", "EvalOptions": "cases",
    "load_dataset": "cases",
    "Cassette": "cassette", "capture": "cassette",
    "Budget": "checks", "Children": "checks", "ForbiddenTools": "checks",
    "Handoffs": "checks", "MatchesSchema": "checks", "Output": "checks", "Regex": "checks",
    "Status": "checks", "Trajectory": "checks",
    "Call": "facts", "RunFacts": "facts", "run_facts": "facts",
    "Judge": "judge",
    "CaseResult": "ackloop.domain.eval_reports", "EvalReport": "ackloop.domain.eval_reports",
    "compare": "ackloop.domain.eval_reports",
    "EvalRunner": "runner",
}
__all__ = sorted(_PUBLIC)

EXTRA_HINT = "ackloop eval needs Pydantic Evals: pip install 'ackloop[eval]'"


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ackloop.evals' has no attribute {name!r}")
    path = module if "." in module else f"ackloop.evals.{module}"
    return getattr(importlib.import_module(path), name)


if TYPE_CHECKING:
    from ackloop.domain.eval_reports import CaseResult as CaseResult
    from ackloop.domain.eval_reports import EvalReport as EvalReport
    from ackloop.domain.eval_reports import compare as compare
    from ackloop.evals.cases import EvalDataset as EvalDataset
    from ackloop.evals.cases import EvalInputs as EvalInputs
    from ackloop.evals.cases import EvalOptions as EvalOptions
    from ackloop.evals.cases import load_dataset as load_dataset
    from ackloop.evals.cassette import Cassette as Cassette
    from ackloop.evals.cassette import capture as capture
    from ackloop.evals.checks import Budget as Budget
    from ackloop.evals.checks import Children as Children
    from ackloop.evals.checks import ForbiddenTools as ForbiddenTools
    from ackloop.evals.checks import Handoffs as Handoffs
    from ackloop.evals.checks import MatchesSchema as MatchesSchema
    from ackloop.evals.checks import Output as Output
    from ackloop.evals.checks import Regex as Regex
    from ackloop.evals.checks import Status as Status
    from ackloop.evals.checks import Trajectory as Trajectory
    from ackloop.evals.facts import Call as Call
    from ackloop.evals.facts import RunFacts as RunFacts
    from ackloop.evals.facts import run_facts as run_facts
    from ackloop.evals.judge import Judge as Judge
    from ackloop.evals.runner import EvalRunner as EvalRunner
