"""Where an eval's cases run: the engine in process, a stack or deployment's store and topics,
or a deployment's HTTP API. Each case is a real run, made the way a user makes one.

A target starts a run with a request id the eval chose (so asking again, after a crash of the
eval itself or a redelivery, finds the same run and never makes a second one), reads its view
(``GET /runs/{run_id}``'s), decides what it waits for, and lets time pass. :func:`drive`
does the rest, the same for every target.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ackloop.domain.cost import Spend
from ackloop.domain.records import ReceivedEvent, StepDecision
from ackloop.domain.wire import FilePart, QueryMessage, RunOptions
from ackloop.engine.deps import Deps
from ackloop.evals.cases import EvalInputs
from ackloop.evals.facts import ViewTree

POLL_SECONDS = 0.25
TERMINAL = ("completed", "failed", "cancelled", "rejected")
DECIDER = "ackloop-eval"


class EvalTimeout(Exception):
    """A case's run did not end within the eval's timeout."""


class Target(Protocol):
    label: str

    async def start(self, query: QueryMessage) -> str:
        """Start (or find again) the run of ``query``; its run id."""
        ...

    async def view(self, run_id: str) -> ViewTree | None:
        """The run's view, None while it does not exist yet."""
        ...

    async def decide(self, run_id: str, step: str, decision: StepDecision) -> None: ...

    async def send_event(self, run_id: str, name: str, payload: dict[str, Any]) -> None: ...

    async def wake(self, at: float) -> bool:
        """Let the time of a call that sleeps come (``at``, Unix seconds): whether it came
        now (False: it comes as time passes, as on a stack or a deployment)."""
        ...

    async def settle(self) -> None:
        """Let the runs go on a while (deliver what is queued, or wait a poll's time)."""
        ...

    def link(self, run_id: str) -> str | None:
        """Where a person sees the run (the inspector), if anywhere."""
        ...


@dataclass
class StoreTarget:
    """Runs through the queries topic of a stack or deployment, read from its store: what
    ``ackloop ask`` does. ``deps`` holds the store, the publisher and the settings (the engine's
    own decide and send paths record approvals and events, as ``ackloop runs approve`` does)."""

    deps: Deps
    label: str = "local stack"
    inspector: str | None = None
    """The API's base URL, for each case's link to the inspector."""
    poll_seconds: float = POLL_SECONDS
    counters: Any = None
    """The store's read and write counters, when its database counts them
    (:class:`~ackloop.docdb.counting.CountingDocumentDB`'s ``counters``)."""
    published_bytes: int = 0

    async def start(self, query: QueryMessage) -> str:
        from ackloop.domain.cost import pubsub_billed_bytes
        from ackloop.domain.keys import run_id_for_request

        data = query.model_dump_json().encode()
        await self.deps.publisher.publish(self.deps.settings.queries_topic, data)
        self.published_bytes += pubsub_billed_bytes(len(data))
        return run_id_for_request(query.request_id)

    def spent(self) -> Spend:
        """What the eval's own reads, writes and messages came to here (not its runs'): the
        documents it read to follow its runs, the queries it published; reads and writes
        when the target was given ``counters``."""
        counters = self.counters
        return Spend(firestore_reads=getattr(counters, "docs_read", 0),
                     firestore_writes=getattr(counters, "docs_written", 0),
                     pubsub_bytes=self.published_bytes, requests=0)

    async def view(self, run_id: str) -> ViewTree | None:
        return await store_view(self.deps, run_id)

    async def decide(self, run_id: str, step: str, decision: StepDecision) -> None:
        from ackloop.engine.waits import core as waits

        await waits.resolve(self.deps, run_id, step, decision, "approval")

    async def send_event(self, run_id: str, name: str, payload: dict[str, Any]) -> None:
        from ackloop.engine.waits import arrivals

        await arrivals.deliver(self.deps, run_id, name, ReceivedEvent(
            payload=payload, by=DECIDER, at=self.deps.clock.now(), id=None))

    async def wake(self, at: float) -> bool:
        return False  # the stack's waker publishes the wake at its time

    async def settle(self) -> None:
        await asyncio.sleep(self.poll_seconds)

    def link(self, run_id: str) -> str | None:
        return f"{self.inspector.rstrip('/')}/ui/#/runs/{run_id}" if self.inspector else None


@dataclass
class InProcessTarget(StoreTarget):
    """The engine in this process on the in-memory store (:class:`ackloop.AgentTester`):
    ``loop`` delivers what the handlers publish until nothing is left. A call that sleeps
    does not hold a case up: its clock moves on to the call's time, as the tester's does."""

    loop: Any = None
    label: str = "in process"

    async def start(self, query: QueryMessage) -> str:
        from ackloop.domain.keys import run_id_for_request

        await self.loop.submit(query)
        return run_id_for_request(query.request_id)

    async def wake(self, at: float) -> bool:
        return bool(await self.loop.wake_at(at))

    async def settle(self) -> None:
        await self.loop.run_until_idle(max_deliveries=5000)


async def store_view(deps: Deps, run_id: str) -> ViewTree | None:
    """A run's view as ``GET /runs/{run_id}`` answers it, each child run's below it."""
    from ackloop.api.models import RunView
    from ackloop.api.tree import children_of

    run = await deps.store.runs.get_run(run_id)
    if run is None:
        return None
    steps = await deps.store.steps.list_steps(run_id)
    children = await children_of(deps.store, run, steps)
    view: ViewTree = RunView.of_run(run, steps, children).model_dump(mode="json")
    below = {}
    for key, child in children:
        found = await store_view(deps, child.run_id)
        if found is not None:
            below[key] = found
    view["child_views"] = below
    return view


@dataclass
class HttpTarget:
    """A deployment's HTTP API (``POST /runs``, ``GET /runs/{run_id}``...), with a bearer token
    when it asks for one."""

    url: str
    token: str | None = None
    label: str = "http"
    poll_seconds: float = POLL_SECONDS
    _client: Any = field(default=None, repr=False)

    def client(self) -> Any:
        import httpx

        if self._client is None:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            self._client = httpx.AsyncClient(base_url=self.url.rstrip("/"), headers=headers,
                                             timeout=30.0)
        return self._client

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = await self.client().request(method, path, json=body)
        if response.status_code == 404 and method == "GET":
            return None
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: HTTP {response.status_code}: "
                               f"{response.text[:300]}")
        return response.json()

    async def start(self, query: QueryMessage) -> str:
        body = query.model_dump(mode="json", exclude={"v"}, exclude_none=True)
        created = await self._call("POST", "/runs", body)
        return str(created["run_id"])

    async def view(self, run_id: str) -> ViewTree | None:
        view: ViewTree | None = await self._call("GET", f"/runs/{run_id}")
        if view is None:
            return None
        below = {}
        for child in view.get("children") or []:
            found = await self.view(child["run_id"])
            if found is not None:
                below[child["step"]] = found
        view["child_views"] = below
        return view

    async def decide(self, run_id: str, step: str, decision: StepDecision) -> None:
        await self._call("POST", f"/runs/{run_id}/approvals/{step}", {
            "decision": decision.decision, "args": decision.args, "comment": decision.comment})

    async def send_event(self, run_id: str, name: str, payload: dict[str, Any]) -> None:
        await self._call("POST", f"/runs/{run_id}/events/{name}", {"payload": payload})

    async def wake(self, at: float) -> bool:
        return False  # the deployment's waker publishes the wake at its time

    async def settle(self) -> None:
        await asyncio.sleep(self.poll_seconds)

    def link(self, run_id: str) -> str | None:
        return f"{self.url.rstrip('/')}/ui/#/runs/{run_id}"

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def query_of(inputs: EvalInputs, text: str, request_id: str, conversation: str | None
             ) -> QueryMessage:
    from ackloop.files.local import file_part

    options = RunOptions(**inputs.options.model_dump())
    files: list[FilePart] = [file_part(f) for f in inputs.files] if text == inputs.question else []
    return QueryMessage(request_id=request_id, text=text, agent=inputs.agent,
                        conversation_id=conversation, options=options, files=files)


async def drive(target: Target, inputs: EvalInputs, request_id: str, timeout: float,
                decisions: Any = None) -> ViewTree:
    """Ask the case's questions (its history first, each a run of one conversation) and
    settle each run: decide its approvals and send its events as the case says, let the time
    of a call that sleeps come, until it ends. The case's run's view tree. ``decisions``:
    ``(path, step) -> StepDecision | None`` (``path``: where the waiting run sits in the
    tree, ``""`` at the top), which decides a waiting step before the case's own rules (a
    replay's recorded decisions)."""
    deadline = time.monotonic() + timeout
    conversation: str | None = None
    view: ViewTree = {}
    asked = [*inputs.history, inputs.question]
    for index, text in enumerate(asked):
        rid = request_id if index == len(asked) - 1 else f"{request_id}-h{index}"
        run_id = await target.start(query_of(inputs, text, rid, conversation))
        view = await _settled(target, run_id, inputs, deadline, decisions)
        conversation = str(view.get("conversation_id") or "") or None
    return view


async def _settled(target: Target, run_id: str, inputs: EvalInputs, deadline: float,
                   decisions: Any) -> ViewTree:
    decided: set[tuple[str, str]] = set()
    while True:
        view = await target.view(run_id)
        if view is not None and view.get("status") in TERMINAL:
            return view
        for run, waiting, path in _waiting(view, ""):
            where = (run["run_id"], waiting["step"])
            if where in decided:
                continue
            if await _decide(target, run, waiting, path, inputs, decisions):
                decided.add(where)
        if time.monotonic() > deadline:
            status = view.get("status") if view else "not started"
            raise EvalTimeout(f"run {run_id} did not end in time (it is {status})")
        await target.settle()


def _waiting(view: ViewTree | None, path: str
             ) -> list[tuple[ViewTree, dict[str, Any], str]]:
    """Every waiting step of the tree, with its run's view and where that run sits; the
    calls that sleep last (what the case sends comes before the clock moves on)."""
    if view is None:
        return []
    found = [(view, w, path) for w in view.get("waiting") or []]
    for key, child in (view.get("child_views") or {}).items():
        found += _waiting(child, f"{path}/{key}" if path else key)
    return sorted(found, key=lambda f: f[1].get("wake_at") is not None)


async def _decide(target: Target, run: ViewTree, waiting: dict[str, Any], path: str,
                  inputs: EvalInputs, decisions: Any) -> bool:
    """Decide one waiting step, if the case says how, or let its time come if it sleeps
    (a replay's recorded wake too: it is a time, not an event); whether it was."""
    run_id, step = run["run_id"], waiting["step"]
    if waiting.get("wake_at") is not None:
        return await target.wake(float(waiting["wake_at"]))
    made = decisions(path, step) if decisions is not None else None
    if made is None and waiting.get("waiting_for") == "approval" and inputs.approvals:
        made = StepDecision(decision=inputs.approvals, by=DECIDER, at=time.time(),
                            comment="decided by the eval")
    if made is not None and made.decision != "received":
        await target.decide(run_id, step, made)
        return True
    name = waiting.get("event_name")
    payload = (made.payload if made is not None and made.decision == "received"
               else inputs.events.get(name or "") if name else None)
    if name and payload is not None:
        await target.send_event(run_id, name, dict(payload))
        return True
    return False
