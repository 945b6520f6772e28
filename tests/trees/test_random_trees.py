"""A randomized tree test: trees of runs of depth at most 3 (parallel calls, approvals, events,
children) under kills at the commit boundaries, duplicates, dead letters, redrives, cancels and
deadlines, on the in-memory engine with a driven clock (no sleeping).

CI runs :data:`CI_SEEDS`; ``ACKLOOP_TREE_SEEDS=500`` (the first 500 seeds from 0) or
``ACKLOOP_TREE_SEEDS=1000-1500`` (a range, the end excluded) or ``ACKLOOP_TREE_SEEDS=7,42``
runs others. A failure names its seed: ``ACKLOOP_TREE_SEEDS=42,`` (or ``42-43``) replays it
alone, and
``ACKLOOP_TREE_VERBOSE=1`` prints the tree's plan and the scheduler's actions.

A seed that finds an engine fault not fixed yet goes in :data:`KNOWN_FAILING` (with the rule it
breaks), out of the CI list.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest

from tests.trees.invariants import Report, check, describe
from tests.trees.plan import PLAIN, generate
from tests.trees.scheduler import Scheduler
from tests.trees.world import build

CI_SEEDS = list(range(20))
"""Seeds 0-19."""
KNOWN_FAILING: dict[int, str] = {}
"""Seeds that break a rule today, with the rule (docs/concepts/children.md, "Testing: random
trees"); they run only when named in ``ACKLOOP_TREE_SEEDS``."""
ACTIONS = 250
"""Random moves before the tree is settled."""
MODEL_FAILURE_RATE = 0.05


def seeds_from(text: str | None) -> list[int]:
    """``ACKLOOP_TREE_SEEDS``: a count (``500``: seeds 0-499), a range (``1000-1500``), or
    seeds separated by commas (``7,42``); unset, the CI list."""
    if not text:
        return CI_SEEDS
    if "," in text:
        return [int(s) for s in text.split(",") if s.strip()]
    if "-" in text:
        low, high = text.split("-", 1)
        return list(range(int(low), int(high)))
    return list(range(int(text)))


@pytest.mark.parametrize(("text", "expected"), [
    (None, CI_SEEDS),
    ("", CI_SEEDS),
    ("3", [0, 1, 2]),
    ("1000-1003", [1000, 1001, 1002]),
    ("7,42", [7, 42]),
    ("9,", [9]),
])
def test_seeds_from_the_environment(text: str | None, expected: list[int]) -> None:
    assert seeds_from(text) == expected


async def play(seed: int) -> Report:
    """One tree's life: generate it, run it under faults, settle it, check it."""
    plan = generate(seed)
    world = build(plan, random.Random(seed), MODEL_FAILURE_RATE)
    scheduler = Scheduler(world, seed)
    root = await scheduler.start()
    await scheduler.chaos(ACTIONS)
    await scheduler.settle()
    report = await check(scheduler, root)
    if os.environ.get("ACKLOOP_TREE_VERBOSE"):
        print(f"seed {seed}: {describe(plan)}")
        print("\n".join(scheduler.observed.actions))
    return report


SEEDS = seeds_from(os.environ.get("ACKLOOP_TREE_SEEDS"))


IGNORED = {r for r in os.environ.get("ACKLOOP_TREE_IGNORE", "").split(",") if r}
"""Rules left out (``ACKLOOP_TREE_IGNORE=ledger,ledger-usd``): to run many seeds for the
other rules while a known fault is open."""


@pytest.mark.parametrize("seed", [s for s in SEEDS if s not in KNOWN_FAILING or
                                  os.environ.get("ACKLOOP_TREE_SEEDS")])
async def test_a_random_tree_keeps_every_rule(seed: int) -> None:
    report = PLAYED[seed] = await play(seed)
    failures = [f for f in report.failures if rule_of(f) not in IGNORED]
    assert not failures, (
        f"seed {seed} (replay: ACKLOOP_TREE_SEEDS={seed}, ACKLOOP_TREE_VERBOSE=1):\n"
        + "\n".join(failures))


PLAYED: dict[int, Report] = {}
"""The reports of the seeds played in this session, by seed."""


async def test_the_ci_seeds_meet_faults() -> None:
    """The trees were put under faults at all: kills at the commit boundaries, dead letters
    and their redrives, across the CI seeds (those not played yet in this session are played
    here)."""
    for seed in CI_SEEDS:
        if seed not in PLAYED:
            PLAYED[seed] = await play(seed)
    faults = Counter[str]()
    for seed in CI_SEEDS:
        faults.update({k: v for k, v in PLAYED[seed].notes.items()
                       if k in ("kill", "dead_letter", "redrive")})
    print(f"{len(CI_SEEDS)} seeds: {dict(faults)}")
    assert faults["kill"] >= 10 and faults["dead_letter"] >= 5 and faults["redrive"] >= 5, faults


def rule_of(failure: str) -> str:
    """The rule a failure names: ``seed 3: [ledger-usd] ...`` -> ``ledger-usd``."""
    return failure.split("[", 1)[1].split("]", 1)[0] if "[" in failure else ""


async def test_the_checks_see_a_side_effect_run_twice_and_a_model_step_asked_twice() -> None:
    """The checks can fail: the same tree, its counts tampered with after the fact."""
    seed = CI_SEEDS[0]
    plan = generate(seed)
    world = build(plan, random.Random(seed), 0.0)
    scheduler = Scheduler(world, seed)
    root = await scheduler.start()
    await scheduler.settle()
    assert not (await check(scheduler, root)).failures
    effect = next(c.key for c in plan.calls() if c.kind == PLAIN)
    world.effects.ran[effect] += 1
    world.model.answered[(plan.root.question, 0)] += 1

    failures = (await check(scheduler, root)).failures

    assert {rule_of(f) for f in failures} == {"effect", "model-twice"}, failures
    assert all(f.startswith(f"seed {seed}: ") for f in failures)
