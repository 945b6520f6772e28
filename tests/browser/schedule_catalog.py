"""The schedules page's test catalog (``ACKLOOP_AGENTS=tests.browser.schedule_catalog:catalog``):
an agent that answers at once, and a schedule of it every 2 seconds, declared beside it as a
user's package does. A stack of its own serves it: its runs would crowd the shared inspector
stack's run list."""

from __future__ import annotations

from ackloop import Agent, Schedule
from ackloop.model.function_model import FunctionModel

SCHEDULE_ID = "heartbeat"
AGENT = "pulse"
EVERY_SECONDS = 2

pulse = Agent(AGENT, "You answer every check with a one-line status.",
              script=FunctionModel(lambda _: "All quiet."))
heartbeat = Schedule(id=SCHEDULE_ID, agent=AGENT, text="Check in.", every_seconds=EVERY_SECONDS)
catalog = [pulse, heartbeat]
