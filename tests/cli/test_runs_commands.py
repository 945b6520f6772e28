"""``ackloop runs list|show|follow|cancel|dead-letters|redrive|sweep`` as subprocesses, reading
the runs of a stack named only by ``--directory`` (the Firestore emulator behind its state file)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import IO

import pytest
from google.cloud import pubsub_v1

from ackloop.docdb.base import Write
from ackloop.domain.cost import Cost
from ackloop.domain.records import (
    RunLimits,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    StopReason,
    Waiting,
)
from ackloop.domain.wire import Usage
from ackloop.engine.children import child_run_id, event_name
from ackloop.store.deltas import DeltaRecord, delta_id, deltas_collection
from tests.cli.conftest import Cli, FakeStack

pytestmark = pytest.mark.emulator


def _run(run_id: str, *, created: float, agent: str = "default", conversation: str = "c1",
         status: RunStatus = RunStatus.COMPLETED, stop: StopReason | None = None,
         **fields: object) -> RunRecord:
    return RunRecord(
        run_id=run_id, request_id=f"req-{run_id}", request_hash="h", conversation_id=conversation,
        agent=agent, text="are there any weather alerts where I am?", model="gemini-x",
        created_at=created, status=status, stop_reason=stop,
        limits=RunLimits(max_steps=3, max_seconds=60, max_tool_calls=5), **fields)


def _model_step(turn: int, *, version: str = "gemini-x-001", text: str | None = None,
                completed: bool = True) -> StepRecord:
    result = {"text": text, "model_version": version} if text else {
        "calls": [{"name": "get_ip_address", "args": {}}], "model_version": version}
    return StepRecord(key=f"{turn:04d}-model", kind="model", name="model", turn=turn,
                      status=StepStatus.COMPLETED if completed else StepStatus.RUNNING,
                      created_at=10.0, started_at=10.0, completed_at=10.5 if completed else None,
                      call_seconds=0.4, result=result if completed else None)


def _tool_step(turn: int, *, error: str | None = None, attempts: int = 1) -> StepRecord:
    return StepRecord(key=f"{turn:04d}-tool-000", kind="tool", name="get_ip_address", turn=turn,
                      status=StepStatus.COMPLETED, attempts=attempts, created_at=11.0,
                      started_at=11.0, completed_at=11.25, call_seconds=0.2,
                      result={"response": {"result": "203.0.113.7"}}, last_error=error)


def _seed(stack: FakeStack, runs: list[RunRecord],
          steps: dict[str, list[StepRecord]] | None = None) -> None:
    store = stack.store()
    writes = [Write("create", store.run_path(r.run_id), r.to_doc()) for r in runs]
    writes += [Write("create", store.step_path(run_id, s.key), s.to_doc())
               for run_id, list_ in (steps or {}).items() for s in list_]
    asyncio.run(store.db.commit(writes))


def _ids(stdout: str) -> list[str]:
    return [line.split()[0] for line in stdout.splitlines()[1:]]


def test_list_newest_first_with_filters_whole_lines_and_json(cli: Cli, fake_stack: FakeStack
                                                              ) -> None:
    now = time.time()
    _seed(fake_stack, [
        _run("run-aaaaaaaaaaaaaaaaaaaa", created=now - 172_800, stop=StopReason.ANSWERED,
             answer="yes", usage=Usage(model_calls=2, tool_calls=1), steps_total=3),
        _run("run-bbbbbbbbbbbbbbbbbbbb", created=now - 7200, agent="weather",
             status=RunStatus.FAILED, stop=StopReason.FAILED, error="boom"),
        _run("run-cccccccccccccccccccc", created=now - 3000, conversation="c2",
             status=RunStatus.RUNNING),
    ])
    d = str(fake_stack.directory)
    listed = cli("runs", "list", "--directory", d)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["RUN", "AGENT", "STATUS", "STOP", "REASON", "STEPS", "AGE"]
    # Each run is one line, its id whole, at 40 columns.
    assert [line.split() for line in lines[1:]] == [
        ["run-cccccccccccccccccccc", "default", "running", "-", "0", "50m"],
        ["run-bbbbbbbbbbbbbbbbbbbb", "weather", "failed", "failed", "0", "2h"],
        ["run-aaaaaaaaaaaaaaaaaaaa", "default", "completed", "answered", "3", "2d"],
    ]
    assert _ids(cli("runs", "list", "--limit", "1", "--directory", d).stdout) == [
        "run-cccccccccccccccccccc"]
    assert _ids(cli("runs", "list", "--status", "failed", "--directory", d).stdout) == [
        "run-bbbbbbbbbbbbbbbbbbbb"]
    assert _ids(cli("runs", "list", "--agent", "default", "--conversation", "c1",
                    "--directory", d).stdout) == ["run-aaaaaaaaaaaaaaaaaaaa"]
    as_json = json.loads(cli("runs", "list", "--json", "--directory", d).stdout)
    assert [r["run_id"] for r in as_json["runs"]] == [
        "run-cccccccccccccccccccc", "run-bbbbbbbbbbbbbbbbbbbb", "run-aaaaaaaaaaaaaaaaaaaa"]
    assert as_json["runs"][1]["error"] == "boom" and as_json["runs"][2]["answer"] == "yes"
    none = cli("runs", "list", "--agent", "nobody", "--directory", d)
    assert (none.returncode, none.stdout.strip()) == (0, "no runs")


def test_show_a_budget_stop_and_its_steps(cli: Cli, fake_stack: FakeStack) -> None:
    run = _run("run-budget", created=time.time() - 3, stop=StopReason.MAX_STEPS,
               finished_at=time.time(), usage=Usage(model_calls=3, tool_calls=2))
    _seed(fake_stack, [run], {"run-budget": [
        _model_step(0), _tool_step(0, error="HTTP 503 from the API", attempts=2)]})
    d = str(fake_stack.directory)
    shown = cli("runs", "show", "run-budget", "--directory", d)
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines()[:14])
    assert fields["run"] == "run-budget"
    assert fields["status"] == "completed (stopped by its max_steps budget: no answer)"
    assert fields["answer"] == "-" and fields["model"] == "gemini-x"  # no "answered by"
    assert fields["usage"].startswith("3 model call(s), 2 tool call(s)")
    assert fields["cost"] == "cost not recorded"  # a run stored without one
    steps = shown.stdout.split("\n\n", 1)[1].splitlines()
    assert steps[0].split() == ["STEP", "NAME", "STATUS", "ATTEMPTS", "DURATION", "COST",
                                "ERROR"]
    assert steps[1].split() == ["0000-model", "model", "completed", "1", "0.500", "s", "-",
                                "-"]
    assert steps[2].split()[:6] == ["0000-tool-000", "get_ip_address", "completed", "2",
                                    "0.250", "s"]
    assert steps[2].endswith("HTTP 503 from the API")

    as_json = json.loads(cli("runs", "show", "run-budget", "--json", "--directory", d).stdout)
    assert (as_json["status"], as_json["stop_reason"], as_json["budget_stop"]) == (
        "completed", "max_steps", "max_steps")
    assert [(s["key"], s["attempts"], s["last_error"]) for s in as_json["steps"]] == [
        ("0000-model", 1, None), ("0000-tool-000", 2, "HTTP 503 from the API")]


def test_show_an_answered_run_names_the_model_that_answered(cli: Cli, fake_stack: FakeStack
                                                            ) -> None:
    run = _run("run-answered", created=time.time(), stop=StopReason.ANSWERED, answer="Sunny.")
    _seed(fake_stack, [run], {"run-answered": [
        _model_step(0), _tool_step(0), _model_step(1, version="gemini-x-002", text="Sunny.")]})
    shown = cli("runs", "show", "run-answered", "--directory", str(fake_stack.directory))
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines()[:14])
    assert fields["model"] == "gemini-x; answered by gemini-x-002"
    assert fields["answer"] == "Sunny."


def test_show_a_run_in_flight_with_the_cost_of_each_step_and_the_total(
    cli: Cli, fake_stack: FakeStack
) -> None:
    ingest = Cost(usd=0.000002, firestore_writes=2, pubsub_bytes=2000, requests=1)
    spent = Cost(usd=0.0011, gemini_usd=0.0011, prompt_tokens=1000, output_tokens=200,
                 firestore_reads=3, firestore_writes=4, pubsub_bytes=3000, requests=1,
                 request_seconds=1.5)
    run = _run("run-flight", created=time.time(), status=RunStatus.RUNNING, ingest_cost=ingest)
    model = _model_step(0).model_copy(update={
        "cost": spent, "usage": Usage(model_calls=1, prompt_tokens=1000, output_tokens=200,
                                      total_tokens=1200)})
    _seed(fake_stack, [run], {"run-flight": [model, _model_step(1, completed=False)]})
    d = str(fake_stack.directory)
    shown = cli("runs", "show", "run-flight", "--directory", d)
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines()[:15])
    assert fields["usage"].startswith("1 model call(s), 0 tool call(s), 1200 token(s)")
    assert fields["cost"] == (
        "$0.001102: 1,000 prompt + 200 output tokens, 3 Firestore reads + 6 writes, "
        "5,000 Pub/Sub bytes, 2 request(s) 1.50 s (list prices of 2026-11-30)")
    steps = shown.stdout.split("\n\n", 1)[1].splitlines()
    assert steps[1].split()[:7] == ["0000-model", "model", "completed", "1", "0.500", "s",
                                    "$0.001100"]
    assert steps[2].split()[:5] == ["0001-model", "model", "running", "1", "-"]

    as_json = json.loads(cli("runs", "show", "run-flight", "--json", "--directory", d).stdout)
    assert as_json["cost"]["usd"] == pytest.approx(0.001102)
    assert as_json["usage"]["model_calls"] == 1
    assert [s["cost"] and s["cost"]["prompt_tokens"] for s in as_json["steps"]] == [1000, None]


def test_a_run_that_does_not_exist_is_one_line(cli: Cli, fake_stack: FakeStack) -> None:
    d = str(fake_stack.directory)
    for command in ("show", "follow", "cancel"):
        missing = cli("runs", command, "run-nope", "--directory", d)
        assert missing.returncode == 1
        assert missing.stderr.splitlines() == [
            f"error: no run run-nope in project {fake_stack.state.project_id} (collection "
            f"prefix {fake_stack.state.env['ACKLOOP_COLLECTION_PREFIX']!r})"]


def test_follow_prints_each_step_as_it_completes_then_the_end(cli: Cli, fake_stack: FakeStack
                                                               ) -> None:
    run = _run("run-live", created=time.time(), status=RunStatus.RUNNING)
    _seed(fake_stack, [run], {"run-live": [_model_step(0), _model_step(1, completed=False)]})
    follower = cli.popen("runs", "follow", "run-live", "--json", "--timeout", "60",
                         "--directory", str(fake_stack.directory))
    assert follower.stdout is not None
    first = json.loads(follower.stdout.readline())
    assert (first["type"], first["cursor"]) == ("step", "0000-model")
    # The run moves on while it is followed: the next step completes, then the run answers.
    store = fake_stack.store()
    asyncio.run(store.db.commit([
        Write("set", store.step_path("run-live", "0001-model"),
              _model_step(1, text="Sunny.").to_doc()),
        Write("update", store.run_path("run-live"), {
            "status": "completed", "stop_reason": "answered", "answer": "Sunny.",
            "finished_at": time.time()}),
    ]))
    out, err = follower.communicate(timeout=60)
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["type"], e["cursor"]) for e in events] == [("step", "0001-model"),
                                                          ("finished", "end")]
    assert events[-1]["answer"] == "Sunny." and events[-1]["budget_stop"] is None
    assert follower.returncode == 0, err


def test_follow_exits_non_zero_on_a_failed_run_and_says_why(cli: Cli, fake_stack: FakeStack
                                                           ) -> None:
    run = _run("run-failed", created=time.time(), status=RunStatus.FAILED,
               stop=StopReason.FAILED, error="dead_lettered: get_ip_address kept failing")
    _seed(fake_stack, [run], {"run-failed": [_model_step(0)]})
    followed = cli("runs", "follow", "run-failed", "--directory", str(fake_stack.directory))
    assert followed.returncode == 1
    lines = followed.stdout.splitlines()
    assert lines[0].split()[:3] == ["✓", "0000-model", "model"]
    assert lines[1].startswith(
        "run run-failed failed: dead_lettered: get_ip_address kept failing (")
    assert len(lines) == 2 and "answered by" not in followed.stdout


def test_follow_and_show_give_one_duration_for_a_run_the_run_records(
        cli: Cli, fake_stack: FakeStack) -> None:
    """``runs follow`` (whose last line the chat and ``ask`` print too) of a run that ended
    before it looked gives the run's 23.6 s, as ``runs show`` does, not its own wait."""
    created = time.time() - 600
    run = _run("run-took", created=created, stop=StopReason.ANSWERED, answer="Sunny.",
               finished_at=created + 23.6)
    _seed(fake_stack, [run], {"run-took": [_model_step(0, text="Sunny.")]})
    d = str(fake_stack.directory)
    shown = cli("runs", "show", "run-took", "--directory", d)
    followed = cli("runs", "follow", "run-took", "--directory", d)
    fields = dict(line.split(None, 1) for line in shown.stdout.split("\n\n")[0].splitlines())
    assert fields["took"] == "23.60 s"
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines()[-2].startswith("run run-took completed (0 model call(s), "
                                                        "0 tool call(s), 23.60 s)")


def test_cancel_requests_a_running_run_and_leaves_an_ended_one(cli: Cli, fake_stack: FakeStack
                                                               ) -> None:
    _seed(fake_stack, [
        _run("run-moving", created=time.time(), status=RunStatus.RUNNING),
        _run("run-done", created=time.time(), stop=StopReason.ANSWERED, answer="ok"),
    ])
    d = str(fake_stack.directory)
    cancelled = cli("runs", "cancel", "run-moving", "--directory", d)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == (
        "run run-moving: cancel requested; it stops at its next step boundary")
    stored = fake_stack.run(lambda store: store.runs.get_run("run-moving"))
    assert stored is not None and stored.cancel_requested
    again = json.loads(cli("runs", "cancel", "run-done", "--json", "--directory", d).stdout)
    assert again == {"run_id": "run-done", "outcome": "already_ended", "status": "completed",
                     "cancel_requested": False}


def test_dead_letters_redrive_and_sweep_use_the_stack_of_directory(
    cli: Cli, fake_stack: FakeStack
) -> None:
    stale = _run("run-stale", created=time.time() - 3600, status=RunStatus.RUNNING,
                 progress_at=time.time() - 3600)
    _seed(fake_stack, [stale])
    fake_stack.run(lambda store: store.letters.record_dead_letter("m-1", {
        "run_id": "run-gone", "step": "0000-model", "origin": "model_steps",
        "cause": "kept failing", "data": "{}", "received_at": time.time()}))
    d = str(fake_stack.directory)
    letters = cli("runs", "dead-letters", "--directory", d)
    assert letters.returncode == 0, letters.stderr
    assert letters.stdout.splitlines()[1].split() == [
        "m-1", "run-gone", "0000-model", "model_steps", "kept", "failing"]
    dry = json.loads(cli("runs", "redrive", "--dry-run", "--json", "--directory", d).stdout)
    assert [r["message_id"] for r in dry["redriven"]] == ["m-1"]

    publisher = pubsub_v1.PublisherClient()
    publisher.create_topic(name=publisher.topic_path(
        fake_stack.state.project_id, fake_stack.state.env["ACKLOOP_MODEL_STEPS_TOPIC"]))
    swept = cli("runs", "sweep", "--json", "--directory", d)
    assert swept.returncode == 0, swept.stderr
    assert [(s["run_id"], s["action"]) for s in json.loads(swept.stdout)["swept"]] == [
        ("run-stale", "resumed")]


def test_cancel_and_sweep_need_no_agent_catalog_and_log_no_start_up(
    cli: Cli, fake_stack: FakeStack
) -> None:
    # The stack's functions load the user's agents; the CLI, run elsewhere, cannot import them.
    fake_stack.state.env["ACKLOOP_AGENTS"] = "no_such_pkg.agents:catalog"
    fake_stack.state.save()
    _seed(fake_stack, [_run("run-elsewhere", created=time.time(), status=RunStatus.RUNNING)])
    d = str(fake_stack.directory)
    cancelled = cli("runs", "cancel", "run-elsewhere", "--directory", d)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == (
        "run run-elsewhere: cancel requested; it stops at its next step boundary")
    assert cancelled.stderr == ""
    swept = cli("runs", "sweep", "--directory", d)
    assert swept.returncode == 0, swept.stderr
    assert swept.stderr == ""


def _deltas(stack: FakeStack, run_id: str, *pieces: tuple[str, int, int, str]) -> None:
    """Write deltas (step, attempt, seq, text) as a streaming model step does."""
    store = stack.store()
    asyncio.run(store.db.commit([
        Write("set", f"{deltas_collection(store, run_id)}/{delta_id(step, attempt, seq)}",
              DeltaRecord(step=step, attempt=attempt, seq=seq, text=text).model_dump())
        for step, attempt, seq, text in pieces]))


class Reader:
    """What a process has written to a pipe so far, read by a thread as it comes."""

    def __init__(self, stream: IO[str]) -> None:
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        while char := stream.read(1):
            self.text += char

    def wait_for(self, expected: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while expected not in self.text:
            assert time.monotonic() < deadline, f"no {expected!r} in {self.text!r}"
            time.sleep(0.05)

    def close(self) -> str:
        self._thread.join(timeout=10)
        return self.text


def test_follow_prints_the_text_being_written_and_a_retry_from_the_start(
    cli: Cli, fake_stack: FakeStack
) -> None:
    """The text of the step in flight is printed as its deltas are written, before the step
    commits; attempt 2 starts over after a marker, a late delta of attempt 1 is not printed, and
    the text of a step that completed before following began is not printed either."""
    run = _run("run-stream", created=time.time(), status=RunStatus.RUNNING)
    _seed(fake_stack, [run], {"run-stream": [_model_step(0), _tool_step(0),
                                             _model_step(1, completed=False)]})
    _deltas(fake_stack, "run-stream", ("0000-model", 1, 0, "Let me look that up."),
            ("0001-model", 1, 0, "The harbour "))
    follower = cli.popen("runs", "follow", "run-stream", "--timeout", "60",
                         "--directory", str(fake_stack.directory))
    assert follower.stdout is not None
    out = Reader(follower.stdout)
    try:
        out.wait_for("The harbour ")
        _deltas(fake_stack, "run-stream", ("0001-model", 1, 1, "was quiet"))
        out.wait_for("The harbour was quiet")
        _deltas(fake_stack, "run-stream", ("0001-model", 2, 0, "The harbour was calm"))
        out.wait_for("was calm")
        _deltas(fake_stack, "run-stream", ("0001-model", 1, 2, " and still"),
                ("0001-model", 2, 1, " at dusk."))
        store = fake_stack.store()
        asyncio.run(store.db.commit([
            Write("set", store.step_path("run-stream", "0001-model"),
                  _model_step(1, text="The harbour was calm at dusk.").to_doc()),
            Write("update", store.run_path("run-stream"), {
                "status": "completed", "stop_reason": "answered",
                "answer": "The harbour was calm at dusk.", "finished_at": time.time()}),
        ]))
        assert follower.wait(timeout=60) == 0
    finally:
        follower.kill()
    lines = out.close().splitlines()
    assert lines[0].split()[:2] == ["✓", "0000-model"]
    assert lines[1].split()[:2] == ["✓", "0000-tool-000"]
    assert lines[2:5] == ["The harbour was quiet",
                          "[retrying 0001-model: attempt 2, from the start]",
                          "The harbour was calm at dusk."]
    assert lines[5].split()[:3] == ["✓", "0001-model", "model"]
    assert lines[6].startswith("run run-stream completed (")
    assert lines[7:] == ["The harbour was calm at dusk."]


def test_follow_in_json_prints_no_text(cli: Cli, fake_stack: FakeStack) -> None:
    run = _run("run-json-stream", created=time.time(), status=RunStatus.COMPLETED,
               stop=StopReason.ANSWERED, answer="Sunny.", finished_at=time.time())
    _seed(fake_stack, [run], {"run-json-stream": [_model_step(0, text="Sunny.")]})
    _deltas(fake_stack, "run-json-stream", ("0000-model", 1, 0, "Sunny."))
    followed = cli("runs", "follow", "run-json-stream", "--json",
                   "--directory", str(fake_stack.directory))
    assert followed.returncode == 0, followed.stderr
    assert [json.loads(line)["type"] for line in followed.stdout.splitlines()] == [
        "step", "finished"]


def _call_step(index: int, agent: str) -> StepRecord:
    """A completed call of a sub-agent's tool: it waited for its child run's end."""
    key = f"0000-tool-{index:03d}"
    return StepRecord(key=key, kind="tool", name=f"ask_{agent}", turn=0, index=index,
                      status=StepStatus.COMPLETED, created_at=11.0, started_at=11.0,
                      completed_at=12.0, result={"response": {"result": "ok"}},
                      waiting=Waiting(kind="event", event=event_name(key), tool=f"ask_{agent}",
                                      since=11.0, deadline=99.0))


def test_show_prints_the_tree_of_child_runs_and_json_nests_them(cli: Cli, fake_stack: FakeStack
                                                                ) -> None:
    """planner -> (researcher -> librarian, critic): ``show`` of the planner lists its children
    and its grandchild, indented, one line each (cost and tokens), and its usage with its own
    and its children's apart; ``show`` of a child names its parent."""
    now = time.time()
    researcher_used = Usage(model_calls=3, tool_calls=1, total_tokens=300)  # librarian's too
    critic_used = Usage(model_calls=1, total_tokens=50)
    planner = _run("run-planner", created=now - 10, agent="planner", stop=StopReason.ANSWERED,
                   answer="A plan.", cost=Cost(usd=0.003, requests=3), handed_to="writer",
                   usage=Usage(model_calls=2, tool_calls=2, total_tokens=200)
                   .with_child(researcher_used).with_child(critic_used))

    def child(parent: RunRecord, index: int, agent: str, usd: float, **fields: object
              ) -> RunRecord:
        step = f"0000-tool-{index:03d}"
        fields = {"stop": StopReason.ANSWERED, "answer": "ok"} | fields
        return _run(child_run_id(parent, step), created=now - 5, agent=agent,
                    parent_run_id=parent.run_id, parent_step=step, depth=parent.depth + 1,
                    cost=Cost(usd=usd, requests=1), **fields)  # type: ignore[arg-type]

    researcher = child(planner, 0, "researcher", 0.001,
                       usage=Usage(model_calls=2, tool_calls=1, total_tokens=200)
                       .with_child(Usage(model_calls=1, total_tokens=100)))
    assert researcher.usage.counts() == researcher_used
    critic = child(planner, 1, "critic", 0.0002, status=RunStatus.FAILED, stop=StopReason.FAILED,
                   answer=None, error="boom", usage=critic_used)
    librarian = child(researcher, 0, "librarian", 0.0004,
                      usage=Usage(model_calls=1, total_tokens=100))
    _seed(fake_stack, [planner, researcher, critic, librarian], {
        planner.run_id: [_model_step(0), _call_step(0, "researcher"), _call_step(1, "critic"),
                         _model_step(1, text="A plan.")],
        researcher.run_id: [_model_step(0), _call_step(0, "librarian"),
                            _model_step(1, text="ok")],
        critic.run_id: [_model_step(0, text="boom")],
        librarian.run_id: [_model_step(0, text="ok")],
    })
    d = str(fake_stack.directory)
    shown = cli("runs", "show", planner.run_id, "--directory", d)
    assert shown.returncode == 0, shown.stderr
    head, steps, tree = shown.stdout.split("\n\n")
    fields = dict(line.split(None, 1) for line in head.splitlines())
    assert fields["children"] == ("2 child run(s), $0.001200 of the cost, 350 token(s) (their "
                                  "trees included)")
    assert fields["usage"] == (
        "6 model call(s), 3 tool call(s), 550 token(s): its own 2 model call(s), 2 tool call(s), "
        "200 token(s); its child runs' 4 model call(s), 1 tool call(s), 350 token(s)")
    assert "parent" not in fields
    assert fields["agent"] == "planner (handed to writer)"  # a hand-off ended it
    assert len(steps.splitlines()) == 5  # the header and the planner's own 4 steps
    assert tree.splitlines() == [
        "child runs (agent, run, status, cost, tokens):",
        f"  researcher  {researcher.run_id}  completed (answered)  $0.001000  300 token(s)",
        f"    librarian  {librarian.run_id}  completed (answered)  $0.000400  100 token(s)",
        f"  critic  {critic.run_id}  failed (failed)  $0.000200  50 token(s)",
    ]

    as_json = json.loads(cli("runs", "show", planner.run_id, "--json", "--directory", d).stdout)
    assert as_json["children_cost"]["usd"] == pytest.approx(0.0012)
    assert as_json["handed_to"] == "writer"
    assert as_json["usage"]["children"] == as_json["children_usage"] == {
        "model_calls": 4, "tool_calls": 1, "prompt_tokens": 0, "output_tokens": 0,
        "total_tokens": 350}

    def tree_of(children: list[dict[str, object]]) -> list[object]:
        return [(c["agent"], c["run_id"], c["step"], c["status"], tree_of(c["children"]))  # type: ignore[arg-type]
                for c in children]

    assert tree_of(as_json["children"]) == [
        ("researcher", researcher.run_id, "0000-tool-000", "completed",
         [("librarian", librarian.run_id, "0000-tool-000", "completed", [])]),
        ("critic", critic.run_id, "0000-tool-001", "failed", [])]
    assert as_json["children"][0]["cost"]["usd"] == pytest.approx(0.001)

    of_child = cli("runs", "show", researcher.run_id, "--directory", d)
    assert of_child.returncode == 0, of_child.stderr
    child_fields = dict(line.split(None, 1) for line in of_child.stdout.split("\n\n")[0]
                        .splitlines())
    assert child_fields["parent"] == f"{planner.run_id} (its step 0000-tool-000)"
    assert of_child.stdout.rstrip().splitlines()[-1] == (
        f"  librarian  {librarian.run_id}  completed (answered)  $0.000400  100 token(s)")
    child_json = json.loads(cli("runs", "show", researcher.run_id, "--json",
                                "--directory", d).stdout)
    assert (child_json["parent_run_id"], child_json["parent_step"]) == (planner.run_id,
                                                                       "0000-tool-000")
