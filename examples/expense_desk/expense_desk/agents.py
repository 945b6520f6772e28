"""The desk's agents. ``ACKLOOP_AGENTS=expense_desk.agents:catalog`` serves them.

``expenses`` comes first, so it answers the queries that name no agent; ``auditor`` and
``manager`` are internal: only ``expenses`` reaches them, as a sub-agent and by a hand-off.
"""

from __future__ import annotations

from ackloop import Agent, FunctionModel
from expense_desk.script import auditor_turn, expenses_turn, manager_turn
from expense_desk.tools import open_exception, past_claims, policy_limit

# --8<-- [start:team]
auditor = Agent(
    "auditor",
    "You audit one expense claim: list the past claims of its category with past_claims and "
    "say, in one sentence, whether it may duplicate one (the same amount).",
    tools=[past_claims],
    internal=True,  # reached only as a sub-agent: a query may not name it
    script=FunctionModel(auditor_turn),
)

manager = Agent(
    "manager",
    "You are the finance manager. A claim over the policy's limit was handed to you: ask "
    "finance for an exception with open_exception and tell the employee what happens next.",
    tools=[open_exception],
    internal=True,
    script=FunctionModel(manager_turn),
)

expenses = Agent(
    "expenses",
    "You answer employees' questions about expense claims. When a receipt is attached, read "
    "the amount and what it was for from it. Look the category's limit up with policy_limit "
    "and ask the auditor about the claim, both at once. Within the limit, say so with the "
    "auditor's finding; over it, hand the conversation to the manager.",
    tools=[policy_limit, auditor.as_tool(max_steps=4), manager.as_handoff()],
    max_steps=8,
    script=FunctionModel(expenses_turn),
)

catalog = [expenses, auditor, manager]
# --8<-- [end:team]
