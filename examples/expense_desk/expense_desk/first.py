"""The tutorial's first agent: one tool, one script. ``expense_desk.agents`` grows it into
the desk of three agents."""

from __future__ import annotations

from ackloop import Agent, FunctionModel
from expense_desk.script import limit_turn
from expense_desk.tools import policy_limit

# --8<-- [start:agent]
expenses = Agent(
    "expenses",
    "You answer employees' questions about the expense policy. Look the category's limit "
    "up with policy_limit before you answer.",
    tools=[policy_limit],
    script=FunctionModel(limit_turn),  # plays the agent offline: no model, no credentials
)

catalog = [expenses]
# --8<-- [end:agent]
