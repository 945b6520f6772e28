"""Matching what a run did against what a case expects: values, arguments, trajectories.

Pure functions, so every rule has a table test (``tests/evals/test_matchers.py``).

A **value matcher** is a literal (equal, and of the same JSON type) or a one-key mapping whose
key starts with ``$``:

=================  ============================================================
``{"$any": true}``  anything, present
``{"$absent": true}``  the argument is not given
``{"$contains": s}``  a string containing ``s`` (or a list containing the item ``s``)
``{"$icontains": s}``  the same, ignoring case
``{"$regex": p}``  a string ``p`` matches somewhere (RE2 syntax, linear time)
``{"$one_of": [..]}``  equal to one of the values
``{"$gt"|"$gte"|"$lt"|"$lte": n}``  a number, compared to ``n``
=================  ============================================================

A mapping of literals matches a mapping holding at least those keys, each matching (so an
expected call's ``args`` lists only the arguments that matter).

An **expected call** is a tool's name, or ``{"name": ..., "args": {...}, "agent": ...}``
(``agent``: only a call that agent's run made). A **trajectory** is checked in one of three
modes: ``exact`` (the same calls, in that order, nothing else), ``in_order`` (the expected
calls in that order, others allowed between), ``any_order`` (each expected call made, in any
order, others allowed).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ackloop.domain import patterns
from ackloop.evals.facts import Call

Mode = Literal["exact", "in_order", "any_order"]
MODES: tuple[Mode, ...] = ("exact", "in_order", "any_order")
_ABSENT = object()
_COMPARE = {"$gt": lambda a, b: a > b, "$gte": lambda a, b: a >= b,
            "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b}
OPERATORS = ("$any", "$absent", "$contains", "$icontains", "$regex", "$one_of", *_COMPARE)


def is_operator(expected: Any) -> bool:
    return (isinstance(expected, dict) and len(expected) == 1
            and next(iter(expected)).startswith("$"))


def check_matcher(expected: Any) -> None:
    """Raise ValueError for a matcher no value could be checked against (an unknown
    operator, a ``$regex`` that does not compile), so a dataset fails when it loads."""
    if is_operator(expected):
        ((op, operand),) = expected.items()
        if op not in OPERATORS:
            raise ValueError(f"unknown matcher {op!r}; known: {', '.join(OPERATORS)}")
        if op == "$regex":
            patterns.compiled(str(operand))
        if op == "$one_of" and not isinstance(operand, list):
            raise ValueError("$one_of takes a list of values")
    elif isinstance(expected, dict):
        for value in expected.values():
            check_matcher(value)
    elif isinstance(expected, list):
        for value in expected:
            check_matcher(value)


def matches(expected: Any, actual: Any = _ABSENT) -> bool:
    """Whether ``actual`` (``_ABSENT`` when missing) satisfies the matcher ``expected``."""
    if is_operator(expected):
        ((op, operand),) = expected.items()
        return _operator(op, operand, actual)
    if actual is _ABSENT:
        return False
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            matches(value, actual.get(key, _ABSENT)) for key, value in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(matches(e, a) for e, a in zip(expected, actual, strict=True)))
    return _same(expected, actual)


def _same(expected: Any, actual: Any) -> bool:
    """Equal and of the same JSON type (``1 == True`` in Python, not in JSON)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    return bool(expected == actual)


def _operator(op: str, operand: Any, actual: Any) -> bool:
    if op == "$absent":
        return (actual is _ABSENT) == bool(operand)
    if actual is _ABSENT:
        return False
    if op == "$any":
        return bool(operand)
    if op in ("$contains", "$icontains"):
        if isinstance(actual, list):
            return any(_same(operand, item) for item in actual)
        if not isinstance(actual, str):
            return False
        if op == "$icontains":
            return str(operand).casefold() in actual.casefold()
        return str(operand) in actual
    if op == "$regex":
        return isinstance(actual, str) and patterns.search(str(operand), actual)
    if op == "$one_of":
        return any(_same(option, actual) for option in operand)
    if op in _COMPARE:
        numeric = isinstance(actual, int | float) and not isinstance(actual, bool)
        return numeric and bool(_COMPARE[op](actual, operand))
    raise ValueError(f"unknown matcher {op!r}; known: {', '.join(OPERATORS)}")


@dataclass(frozen=True)
class ExpectedCall:
    """A call a case expects: its tool, the arguments that matter, which agent made it."""

    name: str
    args: dict[str, Any] | None = None
    agent: str | None = None

    @classmethod
    def of(cls, spec: str | dict[str, Any] | ExpectedCall) -> ExpectedCall:
        if isinstance(spec, ExpectedCall):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ValueError(f"an expected call is a tool's name or {{name, args, agent}}, "
                             f"got {spec!r}")
        unknown = set(spec) - {"name", "args", "agent"}
        if unknown:
            raise ValueError(f"an expected call has name, args and agent; not {sorted(unknown)}")
        args = spec.get("args")
        if args is not None:
            if not isinstance(args, dict):
                raise ValueError(f"{spec['name']}: args is a mapping of argument matchers")
            check_matcher(args)
        return cls(spec["name"], args, spec.get("agent"))

    def accepts(self, call: Call) -> bool:
        return (call.name == self.name
                and (self.agent is None or call.agent == self.agent)
                and (self.args is None or matches(self.args, call.args)))

    def label(self) -> str:
        args = "" if self.args is None else json.dumps(self.args, ensure_ascii=False,
                                                       sort_keys=True, default=str)
        agent = f" [{self.agent}]" if self.agent else ""
        return f"{self.name}({args or '…'}){agent}"


@dataclass(frozen=True)
class Matched:
    """How a trajectory compared: passed, a score in [0, 1], and the lines that show it."""

    passed: bool
    score: float
    lines: list[str]

    def reason(self) -> str:
        return "\n".join(self.lines)


def match_trajectory(expected: Sequence[ExpectedCall], actual: Sequence[Call],
                     mode: Mode) -> Matched:
    """Compare the calls made with the expected ones. The score is the share of expected
    calls matched (for ``exact``, also counting the calls made that were not expected)."""
    if mode == "exact":
        return _exact(expected, actual)
    if mode == "in_order":
        pairs = _in_order(expected, actual)
    elif mode == "any_order":
        pairs = _any_order(expected, actual)
    else:
        raise ValueError(f"trajectory mode {mode!r}; known: {', '.join(MODES)}")
    found = {e for e, _ in pairs}
    missing = [expected[i] for i in range(len(expected)) if i not in found]
    score = len(pairs) / len(expected) if expected else 1.0
    lines = [f"{len(pairs)} of {len(expected)} expected call(s) made ({mode})"]
    lines += [f"  = {actual[a].label()}" for _, a in sorted(pairs, key=lambda p: p[1])]
    lines += [f"  - {e.label()}  (expected, not made)" for e in missing]
    if missing:
        lines.append("  calls made: " + (", ".join(c.name for c in actual) or "none"))
    return Matched(not missing, score, lines)


def _in_order(expected: Sequence[ExpectedCall], actual: Sequence[Call]) -> list[tuple[int, int]]:
    """The expected calls found as a subsequence, greedily (which finds the longest prefix
    of ``expected`` that is one)."""
    pairs: list[tuple[int, int]] = []
    start = 0
    for e_index, wanted in enumerate(expected):
        for a_index in range(start, len(actual)):
            if wanted.accepts(actual[a_index]):
                pairs.append((e_index, a_index))
                start = a_index + 1
                break
        else:
            break
    return pairs


def _any_order(expected: Sequence[ExpectedCall], actual: Sequence[Call]
               ) -> list[tuple[int, int]]:
    """The most expected calls each matched to a distinct call (bipartite matching by
    augmenting paths: a greedy pass would let a loose matcher take a call a strict one
    needed)."""
    owner: dict[int, int] = {}  # actual index -> expected index

    def place(e_index: int, seen: set[int]) -> bool:
        for a_index, call in enumerate(actual):
            if a_index in seen or not expected[e_index].accepts(call):
                continue
            seen.add(a_index)
            if a_index not in owner or place(owner[a_index], seen):
                owner[a_index] = e_index
                return True
        return False

    for e_index in range(len(expected)):
        place(e_index, set())
    return sorted((e, a) for a, e in owner.items())


def _exact(expected: Sequence[ExpectedCall], actual: Sequence[Call]) -> Matched:
    ok = [i for i in range(min(len(expected), len(actual))) if expected[i].accepts(actual[i])]
    passed = len(expected) == len(actual) and len(ok) == len(expected)
    longest = max(len(expected), len(actual))
    score = len(ok) / longest if longest else 1.0
    lines = [f"{len(ok)} of {len(expected)} expected call(s) in place, {len(actual)} made "
             "(exact)"]
    for i in range(longest):
        wanted = expected[i] if i < len(expected) else None
        made = actual[i] if i < len(actual) else None
        if wanted is not None and made is not None and wanted.accepts(made):
            lines.append(f"  = {made.label()}")
            continue
        if wanted is not None:
            lines.append(f"  - {wanted.label()}  (expected)")
        if made is not None:
            lines.append(f"  + {made.label()}  (made)")
    return Matched(passed, score, lines)


def text_diff(expected: str, actual: str, *, width: int = 20) -> list[str]:
    """A unified diff of two texts, line by line, at most ``width`` lines of it."""
    diff = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(),
                                     "expected", "answer", lineterm="", n=1))
    return diff[:width] + ([f"… {len(diff) - width} more line(s)"] if len(diff) > width else [])


def answer_diff(expected: Any, actual: Any, *, width: int = 20) -> str:
    """Why an answer is not the expected one, for a check that compared them and gave no
    reason: a line diff of two texts, else both values."""
    if isinstance(expected, str) and isinstance(actual, str):
        if "\n" not in expected and "\n" not in actual:
            return f"expected {expected!r}, answered {actual!r}"
        return "the answer differs from the expected:\n" + "\n".join(
            text_diff(expected, actual, width=width))
    return f"expected {_short(expected)}, answered {_short(actual)}"


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"
