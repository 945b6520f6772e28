"""The chaos suite's own logic: run references, in-flight detection, answer comparison, the
shipped numbers and the time factor, transcript checks, the duplicating front."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import httpx
import pytest

from ackloop.bus.delivery import load_policy
from ackloop.config.settings import Settings
from ackloop.domain import records
from ackloop.domain.records import StepRecord, StepStatus
from ackloop.model.us_states import find_state_code
from ackloop.store import Transcript
from ackloop_dev.chaos.checks import Verdict, check_conversation, normalize_answer, segments
from ackloop_dev.chaos.config import scaled_spec
from ackloop_dev.chaos.evidence import ModelEvidence, model_evidence
from ackloop_dev.chaos.kills import interrupted, kill_plan, owner_pid
from ackloop_dev.chaos.model_server import describe
from ackloop_dev.chaos.proxy import DuplicatingFront, published_again
from ackloop_dev.chaos.runner import _outcome
from ackloop_dev.chaos.scenarios import StormResult
from ackloop_dev.chaos.timing import Timing, min_factor
from ackloop_dev.chaos.workload import TEMPLATES, question, reference_of


def test_the_reference_is_found_and_changes_no_state() -> None:
    for template in TEMPLATES:
        text = question(template, "r0042")
        assert reference_of(text) == "r0042"
        assert find_state_code(text) == find_state_code(template.text)


def test_ledger_entry_names_run_turn_and_secret() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Where am I? (ref r0001)"}]},
                         {"role": "model", "parts": [{"text": "x"}]},
                         {"role": "user", "parts": [{"function_response": {
                             "name": "x", "response": {"result": "AIzaSECRET"}}}]}]}
    assert describe(body, "AIzaSECRET") == {"ref": "r0001", "turn": 1, "contents": 3,
                                            "history": 0, "secret": True, "instructions": ""}


def test_hour_rounded_times_are_masked() -> None:
    a = "Flood Watch issued Nov 30 at 2:00AM UTC until Nov 30 at 8:00AM UTC"
    b = "Flood Watch issued Nov 30 at 3:00AM UTC until Nov 30 at 9:00AM UTC"
    assert normalize_answer(a) == normalize_answer(b) != a


def step(key: str, owner: str, status: StepStatus, lease: float, completed: float | None = None
         ) -> StepRecord:
    kind = "model" if "model" in key else "tool"
    return StepRecord(key=key, kind=kind, name=kind, turn=int(key[:4]), owner=owner,
                      status=status, lease_expires_at=lease, completed_at=completed)


def test_in_flight_steps_are_those_the_killed_process_held() -> None:
    assert owner_pid("vm:4242:abc123") == 4242
    steps = [step("0000-model", "vm:1:a", StepStatus.COMPLETED, 0.0, 50.0),
             step("0000-tool-000", "vm:7:a", StepStatus.RUNNING, 103.0)]
    assert interrupted(steps, {7}, 100.0, after_commit=False) == ["0000-tool-000"]
    released = [step("0000-tool-000", "vm:7:a", StepStatus.RUNNING, 0.0)]
    assert interrupted(released, {7}, 100.0, after_commit=False) == []
    committed = [step("0000-model", "vm:7:a", StepStatus.COMPLETED, 0.0, 99.9)]
    assert interrupted(committed, {7}, 100.0, after_commit=True) == ["0000-model"]
    assert interrupted(committed, {8}, 100.0, after_commit=True) == []


def test_kill_plan_interleaves_points() -> None:
    assert kill_plan(("a", "b"), 2) == ["a", "b", "a", "b"]
    assert Counter(kill_plan(("a", "b", "c"), 3)) == {"a": 3, "b": 3, "c": 3}


# -- the shipped numbers and the time factor ----------------------------------------------------


def test_timing_is_the_shipped_numbers_with_one_factor() -> None:
    policy, settings = load_policy(), Settings()
    assert min_factor() == pytest.approx(10 / 60)
    production = Timing.shipped(1.0)
    assert production.dead_letter_after_s == 10 + 20 + 40 + 80 + 160 + 320 + 600 + 600 + 600
    assert production.step_attempts_span_s == 10 + 20 + 40 + 80 + 160 + 320 + 600 + 600
    scaled = Timing.shipped(0.25)
    assert scaled.max_delivery_attempts == policy.max_delivery_attempts
    assert scaled.max_step_attempts == Settings.model_fields["max_step_attempts"].default
    assert scaled.lease_s == Settings.model_fields["lease_seconds"].default * 0.25
    assert scaled.dead_letter_after_s == pytest.approx(production.dead_letter_after_s * 0.25)
    assert scaled.request_timeout_s("model_step") == policy.request_timeout_s["model_step"] / 4
    env = scaled.function_env()
    assert "ACKLOOP_MAX_STEP_ATTEMPTS" not in env and "ACKLOOP_LEASE_SECONDS" in env
    assert scaled.service_env()["ingest"] == {"ACKLOOP_REQUEST_TIMEOUT_SECONDS": "15"}
    for service, variables in Timing.shipped().service_env().items():  # the engine accepts them
        Settings(request_timeout_seconds=float(variables["ACKLOOP_REQUEST_TIMEOUT_SECONDS"]))
        assert service in policy.request_timeout_s
    assert settings.lease_seconds > 0
    with pytest.raises(ValueError, match="below"):
        Timing.shipped(0.1)


def test_fault_specs_are_scaled_and_hang_outlasts_the_model_timeout() -> None:
    timing = Timing.shipped(0.5)
    assert scaled_spec("429:1*3", timing) == "429:0.500*3"
    assert scaled_spec("500*3,malformed", timing) == "500*3,malformed"
    hang = float(scaled_spec("delay:hang*2", timing).split(":")[1].split("*")[0])
    assert hang > timing.model_timeout_s


# -- conversations and transcripts ---------------------------------------------------------------


def _content(role: str, text: str) -> dict[str, object]:
    return {"role": role, "parts": [{"text": text}]}


def _turn(ref: str, answer: str) -> list[dict[str, object]]:
    return [_content("user", f"Where am I? (ref {ref})"),
            {"role": "model", "parts": [{"function_call": {"name": "get_ip_address"}}]},
            {"role": "user", "parts": [{"function_response": {"name": "get_ip_address"}}]},
            _content("model", answer)]


def _transcript(*turns: list[dict[str, object]]) -> Transcript:
    contents = [c for turn in turns for c in turn]
    chunk = records.TranscriptChunk(index=0, contents=contents, tail="x", size=1)
    return Transcript("conv", [chunk])


def _run(run_id: str, started: float, finished: float, answer: str) -> records.RunRecord:
    limits = records.RunLimits(max_steps=5, max_seconds=60, max_tool_calls=5)
    return records.RunRecord(
        run_id=run_id, request_id=run_id, request_hash="h", conversation_id="conv",
        agent="default", text="t", model="m", created_at=started, limits=limits,
        status=records.RunStatus.COMPLETED, stop_reason=records.StopReason.ANSWERED,
        started_at=started, finished_at=finished, answer=answer)


def test_a_conversation_holds_every_turn_once_in_order() -> None:
    runs = [("a1", _run("r1", 1.0, 2.0, "one")), ("a2", _run("r2", 2.0, 3.0, "two"))]
    good = check_conversation("conv", runs, _transcript(_turn("a1", "one"), _turn("a2", "two")))
    assert good.ok and [s.ref for s in segments(_transcript(_turn("a1", "one")))] == ["a1"]

    lost = check_conversation("conv", runs, _transcript(_turn("a2", "two")))
    assert lost.overwritten == ["a1: its turn is in the transcript 0 times"]
    rewritten = check_conversation("conv", runs, _transcript(_turn("a1", "other"),
                                                             _turn("a2", "two")))
    assert rewritten.overwritten and not rewritten.ok
    swapped = check_conversation("conv", runs, _transcript(_turn("a2", "two"),
                                                           _turn("a1", "one")))
    assert swapped.order_problems and not swapped.overwritten
    overlapping = [("a1", _run("r1", 1.0, 2.5, "one")), ("a2", _run("r2", 2.0, 3.0, "two"))]
    assert check_conversation("conv", overlapping, _transcript(
        _turn("a1", "one"), _turn("a2", "two"))).order_problems == ["a2 started before a1 ended"]


def test_ledger_of_a_follow_up_names_its_own_run_and_its_history(tmp_path: Path) -> None:
    body = {"contents": [*_turn("a1", "one"), _content("user", "What is my ip? (ref a2)")]}
    entry = describe(body, "")
    assert (entry["ref"], entry["turn"], entry["history"], entry["contents"]) == ("a2", 0, 4, 5)
    ledger = tmp_path / "ledger.jsonl"
    lines = [{**entry, "t": 1.0, "fault": None},
             {**entry, "t": 2.0, "fault": "delay", "delay_s": 1.0},
             {**entry, "t": 3.0, "fault": "delay", "delay_s": 9.0}]
    ledger.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = model_evidence(ledger, {"a2"}, timeout_s=5.0)
    assert found.answered[("a2", 0)] == 2 and found.faults == {"delay": 1}
    assert found.bad_context == [] and found.history[("a2", 0)] == {4}


# -- the duplicating front ---------------------------------------------------------------------


async def test_the_front_sends_a_second_copy_and_answers_with_the_first() -> None:
    seen: list[bytes] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(503 if len(seen) == 1 else 204, headers={"retry-after": "3"})

    front = DuplicatingFront({"model_step": "http://m/", "dead_letter": "http://d/"},
                             frozenset({"dead_letter"}), concurrent_share=0.0)
    front._client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    answer = await front.push("model_step", b"envelope")
    await asyncio.sleep(0.05)  # the second copy goes after the first answered
    assert answer.status == 503 and answer.headers == {"retry-after": "3"}
    assert seen == [b"envelope", b"envelope"]
    assert (await front.push("dead_letter", b"letter")).status == 204
    assert seen[-1] == b"letter" and len(seen) == 3


def _envelope(message_id: str, step: str, run: str = "run-1") -> bytes:
    return json.dumps({"message": {"messageId": message_id, "data": "",
                                   "attributes": {"run_id": run, "step": step}}}).encode()


async def test_the_front_tells_the_engines_second_message_for_a_step_from_its_own_copies(
) -> None:
    front = DuplicatingFront({"model_step": "http://m/", "tool_step": "http://t/"},
                             concurrent_share=1.0)
    front._client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(204)))
    before = front.stats()
    await front.push("model_step", _envelope("m1", "0001-model"))  # copied: the same id
    await front.push("tool_step", _envelope("t1", "0000-tool-000"))
    await front.push("tool_step", _envelope("t2", "0000-tool-000"))  # not a model step
    assert published_again(before, front.stats()) == 0
    await front.push("model_step", _envelope("m2", "0001-model"))  # a second join
    await front.push("model_step", _envelope("m3", "0001-model", run="run-2"))
    middle = front.stats()
    assert middle["model_steps_published_again"] == {"run-1/0001-model": 1}
    assert published_again(before, middle) == 1
    await front.push("model_step", _envelope("m4", "0001-model"))
    assert published_again(middle, front.stats()) == 1


def test_storm_runs_ended_by_their_budget_are_not_failures_of_the_retry_bound() -> None:
    result = StormResult(failed_reasons={"retries_outlasted_budget": 3}, failures_implied=0)
    assert (result.failed, result.ended_by_budget, result.ok) == (0, 3, True)
    result.failed_reasons["step_attempts_exhausted"] = 1
    assert (result.failed, result.ok) == (1, False)


def test_a_budget_end_is_unexplained_unless_a_kill_a_retry_or_a_fault_slowed_the_run() -> None:
    def ended(ref: str, **fields: object) -> Verdict:
        verdict = Verdict(f"run-{ref}", ref, "t", "completed", stop_reason="max_seconds")
        for name, value in fields.items():
            setattr(verdict, name, value)
        return verdict

    answered = Verdict("run-a", "a", "t", "completed", stop_reason="answered")
    idle = ended("b", timeline="ended 50.1 s")  # nothing slowed it: a wait nobody timed
    killed = ended("c", in_flight_at_kill=1)
    retried = ended("d", retried_steps=2)
    faulted = ended("e")
    malformed = Verdict("run-f", "f", "t", "failed", reason="model_malformed_response",
                        timeline="ended 3.0 s")
    outlasted = Verdict("run-g", "g", "t", "failed", reason="retries_outlasted_budget")
    model = ModelEvidence(faults_by_ref={"e": Counter({"429": 3}), "f": Counter(malformed=1),
                                         "g": Counter({"500": 4})})
    everyone = [answered, idle, killed, retried, faulted, malformed, outlasted]
    out = _outcome(everyone, {v.run_id for v in everyone}, set(), model)

    assert out["ended_by_budget"] == 5
    assert out["ended_by_budget_slowed"] == 4
    assert out["failed_by_injected_model_fault"] == 1
    assert out["ended_by_crash_or_duplicate"] == 1  # idle
    assert out["timelines"] == ["b run-b: ended 50.1 s"]  # the injected failure needs none


def test_extra_calls_of_unclaimed_steps_under_duplicated_pushes_are_reported_apart() -> None:
    """A step run unclaimed may be executed more than once when its run's pushes were
    duplicated (the accepted cost of the skipped claim): reported apart. An extra execution of
    a claimed step, or of any step of a run no push of which was duplicated, is a problem."""
    from ackloop.domain.records import RunLimits, RunRecord, RunStatus
    from ackloop_dev.chaos.checks import _check_executions

    def run_of(run_id: str) -> RunRecord:
        return RunRecord(run_id=run_id, request_id="q", request_hash="h", conversation_id="c",
                         agent="default", text="hi", model="m", created_at=1.0,
                         limits=RunLimits(max_steps=9, max_seconds=9, max_tool_calls=9),
                         status=RunStatus.COMPLETED)

    steps = [StepRecord(key=k, kind="tool", name="get_ip_address", turn=t, unclaimed=unclaimed,
                        status=StepStatus.COMPLETED, completed_at=10.0 + t)
             for k, t, unclaimed in (("0000-tool-000", 0, True), ("0001-tool-000", 1, False))]
    verdicts = {}
    for run_id in ("r1", "r2"):
        verdict = verdicts[run_id] = Verdict(run_id, "ref", "template", "completed")
        tools = Counter({(run_id, s.key): 3 for s in steps})
        _check_executions(verdict, run_of(run_id), steps, ModelEvidence(), tools, set(),
                          duplicated_runs={"r1"})

    assert verdicts["r1"].overlapping_calls == 2  # the unclaimed step's two extra calls
    assert verdicts["r1"].duplicates_outside_kills == 2  # the claimed step's
    assert verdicts["r2"].overlapping_calls == 0  # nothing of r2 was duplicated
    assert verdicts["r2"].duplicates_outside_kills == 4


def test_a_child_run_started_is_counted_per_call_from_the_tool_log(tmp_path: Path) -> None:
    from ackloop_dev.chaos.children import started_children

    log = tmp_path / "tool_step.log"
    line = "run {p} step {k} started child run {c} of agent researcher"
    log.write_text("\n".join([
        json.dumps({"message": line.format(p="r1", k="0000-tool-000", c="c1")}),
        json.dumps({"message": line.format(p="r1", k="0000-tool-001", c="c2")}),
        line.format(p="r2", k="0000-tool-000", c="c3"),  # a plain-text line counts too
        json.dumps({"message": line.format(p="r1", k="0000-tool-000", c="c1")}),
        "not a log line",
    ]) + "\n")
    assert started_children(log) == Counter({("r1", "0000-tool-000"): 2,
                                             ("r1", "0000-tool-001"): 1,
                                             ("r2", "0000-tool-000"): 1})
    assert started_children(tmp_path / "missing.log") == Counter()


def test_the_ledger_names_which_agent_of_a_team_asked() -> None:
    body = {"systemInstruction": {"parts": [{"text": "You are a critic. Say briefly what could be"
                                                     " wrong"}]},
            "contents": [_content("user", "What could be wrong with: Why? (ref ch001)")]}
    entry = describe(body, "")
    assert (entry["ref"], entry["turn"], entry["instructions"]) == (
        "ch001", 0, "You are a critic. Say briefly what could")
    assert describe({"contents": body["contents"]}, "")["instructions"] == ""


def test_the_chaos_model_plays_the_team_by_its_scripts_and_the_rest_as_the_seed_agent() -> None:
    from ackloop.model.base import ModelRequest
    from ackloop.model.scripted import ScriptedModel
    from ackloop_dev.agents.research_team import (
        RESEARCHER_INSTRUCTIONS,
        researcher_answer,
        researcher_question,
    )
    from ackloop_dev.chaos.model_server import chaos_policy

    policy = chaos_policy()
    asked = researcher_question("Why? (ref ch000)")
    turn = policy(ModelRequest(model="m", system_instruction=RESEARCHER_INSTRUCTIONS,
                               contents=[_content("user", asked)], tools=[]))
    assert turn.text == researcher_answer(asked)
    other = ModelRequest(model="m", system_instruction="anything",
                         contents=[_content("user", "What is my ip address?")],
                         tools=[{"name": "get_ip", "description": "ip", "parameters": {}}])
    assert policy(other) == ScriptedModel().decide(other)
    assert turn.text not in (policy(other).text, None)


def test_a_tree_with_a_call_whose_child_is_missing_or_twice_created_is_not_ok() -> None:
    from ackloop_dev.chaos.children import ChildRunsResult

    good = ChildRunsResult(trees=2, answers_ok=2, children=4, children_completed=4)
    assert good.ok
    assert not ChildRunsResult(trees=2, answers_ok=2, children=3, children_completed=3).ok
    assert not ChildRunsResult(trees=2, answers_ok=2, children=4, children_completed=4,
                               calls_without_one_child=["ch000 0000-tool-000"]).ok
    assert not ChildRunsResult(trees=2, answers_ok=2, children=4, children_completed=4,
                               kills_not_fired=["tool:after_child"]).ok
    assert not ChildRunsResult(trees=2, answers_ok=2, children=4, children_completed=4,
                               stray_children=1).ok
    assert not ChildRunsResult().ok
