"""The desk's agents through ackloop's real engine, in-process, with their offline scripts."""

from __future__ import annotations

import pytest
from expense_desk import first
from expense_desk.agents import catalog

from ackloop import AgentTester, ScriptedTurns, run_agent, text


# --8<-- [start:first]
async def test_the_first_agent_looks_the_limit_up() -> None:
    result = await run_agent(first.expenses, "Can I claim 48 EUR for a team dinner?")
    assert (result.status, result.stop_reason) == ("completed", "answered")
    assert [(c.name, c.args) for c in result.tool_calls] == [
        ("policy_limit", {"category": "meals"})]
    assert result.answer == ("The policy refunds up to 60.00 EUR for one meals expense, "
                             "so 48.00 EUR is within it.")
# --8<-- [end:first]


# --8<-- [start:team]
async def test_the_limit_and_the_auditor_at_once() -> None:
    desk = AgentTester(catalog)  # the whole catalog: the sub-agents are agents of their own
    result = await desk.ask("Can I claim 52.50 EUR for a taxi?")
    assert [s.key for s in result.steps] == [
        "0000-model", "0000-tool-000", "0000-tool-001", "0001-model"]  # two calls, one turn
    limit, audit = result.tool_calls
    assert (limit.name, audit.name) == ("policy_limit", "ask_auditor")
    assert audit.result == "No earlier travel claim of 52.50 EUR."  # the child run's answer
    assert result.usage.children is not None and result.usage.children.model_calls == 2
    assert result.answer is not None and result.answer.startswith("Yes. ")


async def test_over_the_limit_the_manager_takes_the_conversation_over() -> None:
    desk = AgentTester(catalog)
    result = await desk.ask("I spent 320 EUR on a hotel night in Paris, can I claim it?")
    assert [c.name for c in result.tool_calls] == [
        "policy_limit", "ask_auditor", "transfer_to_manager", "open_exception"]
    assert result.answer is not None and "I asked finance for an exception: X-" in result.answer
    later = await desk.ask("Any news?", conversation_id=result.conversation_id)
    assert later.agent == "manager"  # the conversation's later runs are the manager's
# --8<-- [end:team]


async def test_a_query_may_not_name_an_internal_agent() -> None:
    with pytest.raises(Exception, match="'auditor' is internal"):
        await AgentTester(catalog).ask("Is this a duplicate?", agent="auditor")


async def test_no_category_means_a_question_back_and_no_tool() -> None:
    result = await AgentTester(catalog).ask("hello")
    assert result.tool_calls == []
    assert result.answer == "What was the expense for: meals, travel, lodging or equipment?"


# --8<-- [start:scripted]
async def test_one_script_for_every_agent() -> None:
    desk = AgentTester(catalog, model=ScriptedTurns([text("Ask finance.")]))
    result = await desk.ask("Can I claim 48 EUR for a team dinner?")
    assert (result.answer, result.tool_calls) == ("Ask finance.", [])
# --8<-- [end:scripted]
