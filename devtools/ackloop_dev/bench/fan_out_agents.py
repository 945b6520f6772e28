"""The agents :mod:`ackloop_dev.bench.fan_out` runs (``ACKLOOP_AGENTS`` of its stack).

``leaf``: no tools, so the scripted model answers it in one instant step. ``fan-out-N`` (N in
:data:`WIDTHS`): N sub-agent tools, each a call of ``leaf``; with no script of its own, the
scripted model asks all N at once on its first turn (N child runs), then answers.
"""

from __future__ import annotations

from ackloop.agents.agent import Agent

LEAF = "leaf"
WIDTHS = (2, 10, 30, 60)


def agents() -> list[Agent]:
    leaf = Agent(LEAF, "Answer the question in one short sentence.")
    parents = [Agent(f"fan-out-{n}", "Ask every helper at once, then sum up what they said.",
                     [leaf.as_tool(name=f"ask_leaf_{i}") for i in range(n)],
                     max_steps=4 * n, max_tool_calls=4 * n)
               for n in WIDTHS]
    return [leaf, *parents]
