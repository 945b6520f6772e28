"""The inspector's test catalog (``ACKLOOP_AGENTS=tests.browser.agents:catalog``).

Offline scripts only. ``surveyor`` takes several turns of a slow tool, so that a browser sees its
run while it is live; ``fragile`` answers its tool's result with something no model could say,
so its run fails with a cause; ``echo`` answers at once; ``narrator`` answers with a paragraph
(streamed by the fake model in chunks, for the live text); ``approval-demo`` is the built-in
agent whose payments wait for a person; ``lead`` asks two sub-agents at once, ``scout`` (one slow
survey) and ``checker``, each call a child run, then answers with what they said;
``research-team`` is the development catalog's planner (its ``researcher`` and ``critic`` child
runs, then a hand-off to ``writer``); ``follow-up`` is its agent whose call sleeps the delay the
question names (hours, for a run that waits asleep while a browser looks at it).
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from ackloop.agents.agent import Agent
from ackloop.model.function_model import (
    Conversation,
    FunctionModel,
    Reply,
    call,
    calls,
    text,
)
from ackloop.tools.definition import tool
from ackloop_dev.agents.approval_demo import approval_demo_agent
from ackloop_dev.agents.follow_up import follow_up_agent
from ackloop_dev.agents.research_team import research_team_agents

SURVEYS = 3
"""Sequential turns of ``survey_site`` in a surveyor run: 2 steps each, then the answer."""
SURVEY_SECONDS = 1.5


class Site(BaseModel):
    site: str = Field(description="The site to survey.")


@tool
async def survey_site(args: Site) -> dict[str, str]:
    """Survey one site (slowly, like a real field visit)."""
    await asyncio.sleep(SURVEY_SECONDS)
    return {"site": args.site, "finding": f"{args.site} is dry"}


def survey_turn(conversation: Conversation) -> Reply:
    done = [r.result["site"] for r in conversation.results if r.error is None]
    if len(done) < SURVEYS:
        return call("survey_site", site=f"site-{len(done) + 1}")
    return text(f"Surveyed {', '.join(done)}: all dry.")


def malformed_turn(conversation: Conversation) -> Reply:
    if not conversation.called("survey_site"):
        return call("survey_site", site="archive")
    return {"mood": "confused"}  # type: ignore[return-value]  # the malformed answer


surveyor = Agent("surveyor", "You survey sites one at a time and report what you found.",
                 [survey_site], script=FunctionModel(survey_turn))
fragile = Agent("fragile", "You survey the archive and then lose your train of thought.",
                [survey_site], script=FunctionModel(malformed_turn))
echo = Agent("echo", "You answer every greeting with a greeting.",
             script=FunctionModel(lambda _: "Hello from the echo desk."))
STORY = ("The harbour was quiet at dusk. Gulls settled on the posts, the ferry's lights came "
         "on one by one, and the water held the last of the sky.")
narrator = Agent("narrator", "You tell a short story about the harbour.",
                 script=FunctionModel(lambda _: STORY))


def scout_turn(conversation: Conversation) -> Reply:
    if not conversation.called("survey_site"):
        return call("survey_site", site="north-field")
    found = conversation.result("survey_site")
    return text(f"Scouted: {found['finding'] if isinstance(found, dict) else found}.")


def lead_turn(conversation: Conversation) -> Reply:
    asked = ("ask_scout", "ask_checker")
    if not all(conversation.called(name) for name in asked):
        return calls(call("ask_scout", question=f"Survey for: {conversation.question}"),
                     call("ask_checker", question=f"Check the plan: {conversation.question}"))
    said = {r.name: r.result if r.error is None else r.error for r in conversation.results}
    return text(f"Scout: {said['ask_scout']} Checker: {said['ask_checker']}")


scout = Agent("scout", "You survey the one site you are asked about and say what you found.",
              [survey_site], script=FunctionModel(scout_turn))
checker = Agent("checker", "You check a plan and name its faults.",
                script=FunctionModel(lambda c: "No faults found."))
lead = Agent("lead", "You send a scout and a checker at once, then report what they said.",
             [scout.as_tool(), checker.as_tool()], script=FunctionModel(lead_turn))
catalog = [surveyor, fragile, echo, narrator, approval_demo_agent(), lead, scout, checker,
           *research_team_agents(), follow_up_agent()]
