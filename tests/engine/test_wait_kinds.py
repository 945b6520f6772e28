"""Each kind of wait owns its words: the API's view, the CLI's lines, a refused decision and the
deadline's rejection say what the kind says, and nothing outside the kind spells them out. A new
kind is a module and a line in the list (here one made up for the test, ``tick``), and the API,
the CLI and the mechanism take it as they take the others.

On the in-memory engine with the real dispatch and a manual clock."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.api.models import WaitingView
from ackloop.cli.follow import Followed, waiting_lines
from ackloop.domain.errors import DecisionRefused
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.records import RunStatus, StepDecision, Waiting
from ackloop.engine.sweep import sweep
from ackloop.engine.waits import core as waits
from ackloop.engine.waits import kinds
from ackloop.engine.waits.kind import Wait, WaitKind
from ackloop.tools.definition import Tool
from tests.engine import test_one_wait
from tests.engine.test_one_wait import KEY, advance, ended, step_of, waiting

AT = 1_800_000_000.0
"""2027-01-15 08:00:00 UTC."""


def made(kind: str, **fields: Any) -> Waiting:
    return Waiting(kind=kind, tool="pay", args={"to": "Ada"}, since=AT, deadline=AT + 60,
                   **fields)


@pytest.mark.parametrize(("waiting", "label", "awaits", "missed"), [
    (made("approval"), ("waiting for", "a decision"), "an approval",
     "no decision before the deadline"),
    (made("event", event="receipt:Ada"), ("waiting for", "event receipt:Ada"),
     "the event 'receipt:Ada' (POST /runs/r1/events/receipt:Ada)",
     "no 'receipt:Ada' event before the deadline"),
    (made("child", event="child.0000-tool-000"), ("waiting for", "its child runs"),
     "its child run's end", "its agent did not answer before the deadline"),
    (made("time", wake_at=AT + 60), ("asleep until", "2027-01-15 08:01:00 UTC"),
     "its time (2027-01-15 08:01:00 UTC)", "its time did not come before the deadline"),
])
def test_each_kind_says_what_it_waits_for(waiting: Waiting, label: tuple[str, str],
                                          awaits: str, missed: str) -> None:
    kind = kinds.kind_of(waiting)
    assert kind.label(waiting) == label
    assert kind.awaits("r1", waiting) == awaits
    assert kind.missed(waiting) == missed


@pytest.mark.parametrize(("waiting", "told"), [
    (made("approval"), ["run r1 waits for approval of pay({\"to\": \"Ada\"}) at step s, until "
                        "2027-01-15 08:01:00 UTC",
                        "  approve: ackloop runs approve r1 s [--args JSON] [--comment TEXT]",
                        "  reject:  ackloop runs reject r1 s [--comment TEXT]"]),
    (made("event", event="paid"), ["run r1 waits for the event 'paid' in pay({\"to\": \"Ada\"}) "
                                   "at step s, until 2027-01-15 08:01:00 UTC",
                                   "  send: ackloop runs send-event r1 paid [--payload JSON]"]),
    (made("child", event="child.s"), []),
    (made("time", wake_at=AT + 30), ["run r1 sleeps in pay({\"to\": \"Ada\"}) at step s until "
                                     "2027-01-15 08:00:30 UTC, then goes on by itself",
                                     "  follow: ackloop runs follow r1"]),
])
def test_each_kind_tells_the_cli_how_it_is_resolved(waiting: Waiting, told: list[str]) -> None:
    assert kinds.kind_of(waiting).told("r1", "s", waiting) == told


def test_a_wait_of_a_kind_this_deployment_does_not_know_says_so() -> None:
    with pytest.raises(LookupError, match=r"'later'.*it knows child, approval, time, event"):
        kinds.kind_of(made("later"))


@pytest.mark.parametrize("kind", sorted(kinds.KINDS))
async def test_the_api_and_the_cli_show_every_kind_in_its_own_words(kind: str) -> None:
    loop, root = await waiting(kind)
    step = await step_of(loop, root)
    assert step.waiting is not None
    own = kinds.KINDS[kind]
    view = WaitingView.of(step)
    assert view is not None
    assert (view.waiting_for, view.label) == (own.shown_as, own.label(step.waiting))
    followed = Followed(root.run_id, run=root, steps=[step])
    assert waiting_lines(followed) == own.told(root.run_id, KEY, step.waiting)


# -- a kind made up for the test: a call to ``tick`` waits for a "tick", the tool runs after it

def _tick_of(tool: Tool, args: JsonDict, now: float) -> Wait | None:
    return Wait(tool, TICK) if tool.name == "transfer" else None


TICK = WaitKind("tick", clock_runs=False, announced=True, shown_as="tick", of=_tick_of,
                label=lambda w: ("waiting for", "the next tick"),
                awaits=lambda run_id, w: "a tick (it comes by itself)",
                missed=lambda w: "no tick came", timeout=lambda tool: 60.0,
                told=lambda run_id, key, w: [f"run {run_id} waits for a tick at {key}"])


@pytest.fixture
def tick(monkeypatch: pytest.MonkeyPatch) -> WaitKind:
    """``tick`` listed first: a module and a line in the list is all a kind is."""
    monkeypatch.setattr(kinds, "ORDER", (TICK, *kinds.ORDER))
    monkeypatch.setitem(kinds.KINDS, "tick", TICK)
    monkeypatch.setitem(test_one_wait.CALLS, "tick", test_one_wait.CALLS["approval"])
    return TICK


async def test_a_new_kind_is_one_module_and_a_line_in_the_list(tick: WaitKind) -> None:
    # The approval world's call, now a tick: it waits of the new kind, shown in its words.
    loop, root = await waiting("tick")
    step = await step_of(loop, root)
    assert step.waiting is not None and step.waiting.deadline == pytest.approx(
        step.waiting.since + 60.0)  # its own timeout
    view = WaitingView.of(step)
    assert view is not None and (view.waiting_for, view.label) == ("tick", (
        "waiting for", "the next tick"))
    assert waiting_lines(Followed(root.run_id, run=root, steps=[step])) == [
        f"run {root.run_id} waits for a tick at {KEY}"]
    # A decision for another kind is refused in the tick's own words.
    with pytest.raises(DecisionRefused, match=f"step {KEY} waits for a tick"):
        await waits.resolve(loop.deps, root.run_id, KEY, StepDecision(
            decision="approve", by="ada", at=loop.deps.clock.now()), "approval")
    # Its deadline rejects the call in its words, through the sweeper as for every kind.
    advance(loop, 61.0 + loop.deps.settings.sweep_stale_seconds)  # the sweeper's own lag
    await sweep(loop.deps)
    root, step = await ended(loop, root)
    assert root.status is RunStatus.COMPLETED
    assert root.answer == "root: not run: no tick came", root.answer


async def test_a_tick_resolved_runs_the_tool(tick: WaitKind) -> None:
    loop, root = await waiting("tick")
    await waits.resolve(loop.deps, root.run_id, KEY, StepDecision(
        decision="received", by="clockwork", at=loop.deps.clock.now()), "tick")
    root, _ = await ended(loop, root)
    assert root.answer == "root: sent 5", root.answer
