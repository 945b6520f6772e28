"""The seeded generator of a tree's plan: which calls each run's model turns make.

A plan is data only (no engine): the scripted model plays it, the checks read it. Every run is
known by its question (the root's text, a child's call's ``question``), unique in the tree, and
every call by its ``key`` argument (the question, the turn and the index), so a side effect or
a model request is counted per call and per step without asking the engine for its keys.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MAX_DEPTH = 3
"""The deepest child run (``max_agent_depth``): the root is at depth 0."""

PLAIN, RETRY_SAFE, GATED, WAITS, CHILD = "effect", "lookup", "gated", "waiter", "child"
KINDS = (PLAIN, RETRY_SAFE, GATED, WAITS, CHILD)


def agent_name(depth: int) -> str:
    return f"d{depth}"


def child_tool(depth: int) -> str:
    """The tool an agent of ``depth`` calls its sub-agent with (``Agent.as_tool``'s name)."""
    return f"ask_{agent_name(depth + 1)}"


@dataclass(frozen=True)
class Call:
    kind: str
    key: str
    """The call's identity in the tree: ``<question>/<turn>.<index>``."""
    event: str | None = None
    """The event a ``waiter`` call waits for."""

    def tool_name(self, depth: int) -> str:
        return child_tool(depth) if self.kind == CHILD else self.kind

    def args(self) -> dict[str, str]:
        if self.kind == CHILD:
            return {"question": self.key}
        if self.kind == WAITS:
            return {"key": self.key, "name": str(self.event)}
        return {"key": self.key}


@dataclass
class Node:
    question: str
    depth: int
    turns: list[list[Call]] = field(default_factory=list)
    """The calls of each turn that calls; the turn after the last answers in text."""

    @property
    def agent(self) -> str:
        return agent_name(self.depth)


@dataclass
class Plan:
    seed: int
    nodes: dict[str, Node] = field(default_factory=dict)
    """Every run the tree may start, by question (a child planned is started only if its call
    runs: a cancel or a dead letter may stop its parent first)."""

    @property
    def root(self) -> Node:
        return self.nodes[root_question(self.seed)]

    def calls(self) -> list[Call]:
        return [c for n in self.nodes.values() for turn in n.turns for c in turn]

    def events(self) -> dict[str, str]:
        """Event name -> the question of the run whose call waits for it."""
        return {c.event: q for q, n in self.nodes.items() for turn in n.turns for c in turn
                if c.event is not None}


def root_question(seed: int) -> str:
    return f"s{seed}"


def generate(seed: int, *, max_runs: int = 9) -> Plan:
    """A tree of at most ``max_runs`` runs and depth at most :data:`MAX_DEPTH`: each run makes
    0 to 2 turns of 1 to 3 parallel calls of any kind (no sub-agent at the deepest level)."""
    rng = random.Random(seed)
    plan = Plan(seed)
    events = iter(range(10_000))
    pending = [Node(root_question(seed), 0)]
    while pending:
        node = pending.pop(0)
        plan.nodes[node.question] = node
        for turn in range(rng.choice((0, 1, 1, 2)) if node.depth else rng.choice((1, 2))):
            calls = []
            for index in range(rng.randint(1, 3)):
                key = f"{node.question}/{turn}.{index}"
                room = node.depth < MAX_DEPTH and len(plan.nodes) + len(pending) < max_runs
                kinds = [*KINDS, CHILD] if room else [k for k in KINDS if k != CHILD]
                kind = rng.choice(kinds)
                if kind == CHILD:
                    pending.append(Node(key, node.depth + 1))
                calls.append(Call(kind, key, f"e{next(events)}" if kind == WAITS else None))
            node.turns.append(calls)
    return plan
