"""An eval's cases: what each asks, of which agent, and how its run is checked.

A dataset is a Pydantic Evals :class:`~pydantic_evals.Dataset` whose inputs are
:class:`EvalInputs`: in a YAML or JSON file (:func:`load_dataset`), or built in Python (a module
that defines ``dataset``). A case's ``evaluators`` are Pydantic Evals' own (``Contains``,
``Equals``, ``EqualsExpected``, ``IsInstance``), ackloop's (:mod:`ackloop.evals.checks`) and
the judge (:class:`~ackloop.evals.judge.Judge`)::

    name: weather
    cases:
      - name: alerts-here
        inputs: are there any weather alerts where I am?
        evaluators:
          - Contains: {value: Norman, case_sensitive: false}
          - Trajectory: {calls: [get_ip_address, get_location_info], mode: in_order}
          - Budget: {model_calls: 4}
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_evals import Dataset

from ackloop.evals.cassette import Cassette


class DatasetError(ValueError):
    """A dataset file whose checks do not load: each problem, said in full (a check's name
    that none has, with the names there are; an argument a check does not take, with those
    it does)."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


class EvalOptions(BaseModel):
    """The run's budgets, as a query's options give them (None: the agent's, the deployment's)."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(default=None, gt=0)
    max_seconds: float | None = Field(default=None, gt=0)
    max_tool_calls: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)


class EvalInputs(BaseModel):
    """What a case asks: a question of an agent, with what comes before it and around it."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    agent: str = "default"
    history: list[str] = Field(default_factory=list)
    """Questions asked first, each a run of the same conversation, the case's question last
    (the checks read the last run)."""
    files: list[str] = Field(default_factory=list)
    """Files the question is about: a path (relative to the dataset's file, sent inline) or a
    gs:// or https:// URI."""
    options: EvalOptions = EvalOptions()
    approvals: Literal["approve", "reject"] | None = None
    """How to decide each call that waits for a person's approval (None: a call that waits
    is left waiting, and the case ends as waiting)."""
    events: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Named events to send when the run waits for them (``{name: payload}``)."""
    cassette: Cassette | None = None
    """A recorded run (``ackloop eval capture``): the case replays it, in process, against
    its model turns and tool results; no model is called and no tool runs."""
    run_key: str = Field(default="", exclude=True)
    """Set by the eval: which case and repetition (the run's request id is made of it)."""

    @model_validator(mode="before")
    @classmethod
    def _question_alone(cls, data: Any) -> Any:
        return {"question": data} if isinstance(data, str) else data


EvalDataset = Dataset[EvalInputs, Any, Any]


def checks() -> list[type[Any]]:
    """Every check a dataset file may name that Pydantic Evals does not bring."""
    from ackloop.evals.checks import CHECKS
    from ackloop.evals.judge import Judge

    return [*CHECKS, Judge]


def load_dataset(source: str | Path) -> EvalDataset:
    """A dataset from a ``.yaml``/``.yml``/``.json`` file, or a Python file or module
    (``path/to/cases.py``, ``package.module``, ``package.module:name``) that defines it
    (``dataset`` unless named)."""
    text = str(source)
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such dataset file")
        try:
            dataset = Dataset[EvalInputs, Any, Any].from_file(path,
                                                              custom_evaluator_types=checks())
        except ExceptionGroup as group:  # one error per check that did not load
            raise DatasetError(path, _check_problems(path) or [
                str(e) for e in group.exceptions]) from group
        dataset.name = dataset.name or path.stem
        _resolve_files(dataset, path.parent)
        return dataset
    module_name, _, attribute = text.partition(":")
    if path.suffix == ".py":
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such dataset file")
        spec = importlib.util.spec_from_file_location(f"_ackloop_eval_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        base: Path | None = path.parent
    else:
        module = importlib.import_module(module_name)
        base = None
    found = getattr(module, attribute or "dataset", None)
    if not isinstance(found, Dataset):
        raise TypeError(f"{text}: defines no Dataset named {attribute or 'dataset'!r}")
    if base is not None:
        _resolve_files(found, base)
    return found


def _resolve_files(dataset: EvalDataset, base: Path) -> None:
    """A relative file path in a case is relative to its dataset's file."""
    for case in dataset.cases:
        case.inputs.files = [
            f if f.startswith(("gs://", "https://", "http://")) or Path(f).is_absolute()
            else str(base / f) for f in case.inputs.files]


def _check_problems(path: Path) -> list[str]:
    """What is wrong with the names and arguments of the checks a dataset file names (empty:
    none is; the check itself refused its values)."""
    import difflib
    import inspect
    import json

    import yaml
    from pydantic_evals.evaluators import EvaluatorSpec
    from pydantic_evals.evaluators.common import DEFAULT_EVALUATORS

    known = {c.get_serialization_name(): c for c in [*checks(), *DEFAULT_EVALUATORS]}
    text = path.read_text()
    raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    named = [("the dataset", spec) for spec in (raw or {}).get("evaluators") or []]
    for index, case in enumerate((raw or {}).get("cases") or []):
        where = f"case {case.get('name') or index + 1!r}"
        named += [(where, spec) for spec in case.get("evaluators") or []]
    problems = []
    for where, raw_spec in named:
        try:
            spec = EvaluatorSpec.model_validate(raw_spec)
        except ValueError:
            problems.append(f"{where}: {raw_spec!r} is not a check (a name, or a name and its "
                            "arguments)")
            continue
        check = known.get(spec.name)
        if check is None:
            near = difflib.get_close_matches(spec.name, known, n=1)
            problems.append(f"{where}: no check is named {spec.name!r}"
                            + (f" (did you mean {near[0]!r}?)" if near else "")
                            + f"; the checks are: {', '.join(sorted(known))}")
            continue
        taken = inspect.signature(check).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken.values()):
            continue
        for argument in sorted(set(spec.kwargs) - set(taken)):
            problems.append(f"{where}: check {spec.name} takes no argument {argument!r}; it "
                            f"takes: {', '.join(taken)}")
    return problems
