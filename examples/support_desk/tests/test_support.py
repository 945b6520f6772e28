"""The desk's agents through ackloop's real engine, in-process, with their offline scripts."""

from __future__ import annotations

from support_desk.agents import catalog, support, triage

from ackloop import AgentTester, run_agent


async def test_answers_from_the_order_book() -> None:
    result = await run_agent(support, "Has order A-1234 shipped?")
    assert (result.status, result.stop_reason) == ("completed", "answered")
    assert result.answer == "Order A-1234 is shipped (carrier Correios, expected 2026-12-04)."
    assert [(c.name, c.args) for c in result.tool_calls] == [
        ("lookup_order", {"order_id": "A-1234"})]


async def test_a_delayed_order_gets_a_ticket() -> None:
    result = await run_agent(support, "My order A-2001 is late, what is going on?")
    lookup, ticket = result.tool_calls
    assert (lookup.name, ticket.name) == ("lookup_order", "open_ticket")
    assert ticket.result["ticket"].startswith("T-")
    assert result.answer is not None and f"I opened ticket {ticket.result['ticket']}" in (
        result.answer)
    assert [s.key for s in result.steps] == [
        "0000-model", "0000-tool-000", "0001-model", "0001-tool-000", "0002-model"]


async def test_an_unknown_order_is_reported_not_invented() -> None:
    result = await run_agent(support, "Where is A-9999?")
    assert result.tool_calls[0].error is not None
    assert result.answer == "I could not find order A-9999. Could you check the number?"


async def test_no_order_number_means_asking_for_it_without_tools() -> None:
    result = await run_agent(support, "Hello?")
    assert result.tool_calls == [] and result.answer is not None
    assert "order number" in result.answer


async def test_triage_returns_its_structured_output() -> None:
    result = await run_agent(triage, "I want my money back")
    assert result.output == {"queue": "refund"}


async def test_support_is_the_default_agent_of_the_catalog() -> None:
    tester = AgentTester(catalog)
    result = await tester.ask("Has order A-3000 shipped?")
    assert (result.agent, result.status) == ("support", "completed")
    assert result.answer is not None and result.answer.startswith("Order A-3000 is processing")
