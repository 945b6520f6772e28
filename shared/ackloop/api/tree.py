"""The tree of runs under a run: its child runs (:mod:`ackloop.engine.children`), found from
its steps, for ``GET /runs/{id}``, its event stream and ``ackloop runs show``.

A call of a sub-agent's tool records itself waiting for the event ``child.<its step key>``
(kept on the step once it has completed), and its child's run id is derived from the parent's
run and that key, so a run's steps name its children without any query: a run's children are
read in one batch of documents, never by listing runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from ackloop.domain.records import RunRecord, StepRecord
from ackloop.engine.children import child_run_id, is_reserved
from ackloop.store import AgentStore

MAX_DEPTH = 16
"""How deep :func:`tree` reads at most (a deployment nests sub-agents ``max_agent_depth``, 3 by
default): a bound on the reads, whatever is stored."""


def starts_child(step: StepRecord) -> bool:
    """Whether ``step`` is a sub-agent's call that started a child run (and waits, or waited,
    for its end)."""
    waiting = step.waiting
    return (step.kind == "tool" and waiting is not None and waiting.event is not None
            and is_reserved(waiting.event))


def child_ids(run: RunRecord, steps: Sequence[StepRecord]) -> list[tuple[str, str]]:
    """``(step key, child run id)`` of each child ``run``'s steps started, in step order."""
    return [(s.key, child_run_id(run, s.key)) for s in steps if starts_child(s)]


async def read_runs(store: AgentStore, run_ids: Sequence[str]) -> list[RunRecord | None]:
    """The runs ``run_ids`` (None for one that does not exist), in one batch read."""
    return await store.get_runs(run_ids)


async def children_of(store: AgentStore, run: RunRecord, steps: Sequence[StepRecord]
                      ) -> list[tuple[str, RunRecord]]:
    """``(step key, child run)`` of each child of ``run`` (``steps``: its steps), in step
    order; only children of the run's owner (a child always has its parent's)."""
    started = child_ids(run, steps)
    found = await read_runs(store, [child for _, child in started])
    return [(key, child) for (key, _), child in zip(started, found, strict=True)
            if child is not None and child.owner == run.owner
            and child.parent_run_id == run.run_id]


@dataclass
class Node:
    """A child run in a tree: the parent's step that started it, the run, its own children."""

    step: str
    run: RunRecord
    children: list[Node] = field(default_factory=list)


async def tree(store: AgentStore, run: RunRecord, steps: Sequence[StepRecord],
               depth: int = MAX_DEPTH) -> list[Node]:
    """The children of ``run``, each with its children, down to ``depth`` levels: one batch
    read of the runs of each level under a run, and each child's steps."""
    if depth <= 0:
        return []
    found = await children_of(store, run, steps)
    if not found:
        return []
    their_steps = await asyncio.gather(*(store.list_steps(child.run_id) for _, child in found))
    return [Node(key, child, await tree(store, child, child_steps, depth - 1))
            for (key, child), child_steps in zip(found, their_steps, strict=True)]
