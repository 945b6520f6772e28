"""The sweeper as deployed: Cloud Scheduler calls the api's POST /sweep as ackloop-sweeper, which
may invoke the api and nothing else; the api may publish what the sweeper sends; Firestore has
the composite indexes of the sweeper's queries.

What the sweeper queries and publishes is read off the code, not restated: the sweeper runs once
against an in-memory store that notes every query, through one stalled run of each kind.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, get_args

from starlette.testclient import TestClient

from ackloop.agents.agent import AgentRegistry
from ackloop.api.app import create_app
from ackloop.api.auth import SWEEP_PATH
from ackloop.api.runs import sweep_runs
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.base import Write
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import StepKey
from ackloop.domain.records import (
    Outgoing,
    RunLimits,
    RunRecord,
    StepRecord,
    StepStatus,
    Topic,
)
from ackloop.engine.deps import Deps
from ackloop.engine.sweep import sweep
from ackloop.store import AgentStore
from tests.infra.terraform import TerraformConfig, block, delivery_numbers, expression

# A prefix of our own, to see that every collection the sweeper reads follows it.
PREFIX = "swept_"
API_URI = '${google_cloud_run_v2_service.service["api"].uri}'
SWEEPER = "google_service_account.sweeper"
ENABLED = "${var.sweep.enabled ? 1 : 0}"
# Cloud Scheduler's bounds on an HTTP target's attempt deadline.
SCHEDULER_DEADLINE = (15, 1800)
# DocumentDB reads that need no composite index: by path, or by document id.
NO_INDEX_NEEDED = {"get_all", "list_all", "list_range", "commit", "create", "transact",
                   "list_newest by one field"}
"""``list_newest by one field``: ordered by one field with no equality filter (a run's end
finds its conversation's last transcript chunk by ``index``), which Firestore's automatic
single-field index serves."""
LOGICAL_TOPICS = ("queries", "model_steps", "tool_steps", "answers", "dead_letter")


@dataclass(frozen=True)
class Query:
    collection: str
    field_name: str
    value: Any
    order_by: str


class RecordingDB:
    """A MemoryDocumentDB that notes the sweeper's queries (equality filter and order) and the
    name of every other DocumentDB method it calls."""

    def __init__(self) -> None:
        self.inner = MemoryDocumentDB()
        self.recording = False
        self.queries: list[Query] = []
        self.methods: set[str] = set()
        self.newest: list[tuple[str, tuple[str, ...], str]] = []
        """Each ``list_newest`` with equality filters: collection, filtered fields, order."""

    async def list_where(
        self, collection: str, field_name: str, value: Any, order_by: str, limit: int = 100
    ) -> Any:
        if self.recording:
            self.queries.append(Query(collection, field_name, value, order_by))
        return await self.inner.list_where(collection, field_name, value, order_by, limit)

    async def list_newest(self, collection: str, equal: Any, order_by: str, limit: int = 100,
                          below: Any = None) -> Any:
        if self.recording:
            if equal:
                self.newest.append((collection, tuple(equal), order_by))
            else:
                self.methods.add("list_newest by one field")
        return await self.inner.list_newest(collection, equal, order_by, limit, below)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not callable(method):
            return method

        def noted(*args: Any, **kwargs: Any) -> Any:
            if self.recording:
                self.methods.add(name)
            return method(*args, **kwargs)

        return noted


@dataclass
class Swept:
    actions: dict[str, str]
    queries: list[Query]
    methods: set[str]
    topics: set[str] = field(default_factory=set)
    newest: list[tuple[str, tuple[str, ...], str]] = field(default_factory=list)


def _run(run_id: str, conversation_id: str, now: float) -> RunRecord:
    return RunRecord(
        run_id=run_id, request_id=run_id, request_hash=run_id, conversation_id=conversation_id,
        agent="default", text="?", model="m", created_at=now,
        limits=RunLimits(max_steps=5, max_seconds=60, max_tool_calls=5),
    )


def _step(key: StepKey, status: StepStatus, outbox: list[Outgoing] | None = None) -> StepRecord:
    return StepRecord(key=str(key), kind=key.kind, name=key.kind, turn=key.turn, status=status,
                      outbox=outbox or [])


async def _sweep_stalled_runs() -> Swept:
    """One stalled run of each kind the sweeper handles, then one sweep, recorded."""
    db = RecordingDB()
    store = AgentStore(cast(Any, db), PREFIX)
    clock = ManualClock()
    publisher = MemoryPublisher()
    settings = Settings()
    deps = Deps(settings=settings, store=store, publisher=publisher, model=cast(Any, None),
                agents=AgentRegistry(), clock=clock, owner="sweeper-test")
    now = clock.now()
    for run_id in ("lost_start", "lost_tools", "no_way_on"):
        await store.runs.create_run(_run(run_id, run_id, now))
    # The model step of turn 0 committed a tool call whose message never left.
    tool_call = Outgoing(topic="tool_steps", data={"run_id": "lost_tools"},
                         target_step=str(StepKey.tool(0, 0)))
    steps = {
        "lost_tools": _step(StepKey.model(0), StepStatus.COMPLETED, [tool_call]),
        # A model step of turn 1 with no turn 0 to say what it was sent: nothing to re-send.
        "no_way_on": _step(StepKey.model(1), StepStatus.RUNNING),
    }
    writes = [Write("create", store.step_path(run, s.key), s.to_doc()) for run, s in steps.items()]
    # A queued run whose conversation's active run ended without starting it.
    await store.runs.create_run(_run("ended", "shared", now))
    await store.runs.create_run(_run("waiting", "shared", now))
    writes.append(Write("update", store.run_path("ended"), {"status": "completed"}))
    await store.db.commit(writes)

    clock.advance(3600)
    db.recording = True
    swept = await sweep(deps, stale_after=60)
    names = {deps.topic(name): name for name in LOGICAL_TOPICS}
    return Swept(
        actions={s.run_id: s.action for s in swept},
        queries=db.queries,
        methods=db.methods,
        topics={names[m.topic] for m in publisher.messages},
        newest=db.newest,
    )


@functools.cache
def swept() -> Swept:
    return asyncio.run(_sweep_stalled_runs())


def test_the_recorded_sweep_took_every_path() -> None:
    assert swept().actions == {
        "lost_start": "resumed",
        "lost_tools": "resumed",
        "no_way_on": "failed",
        "waiting": "started",
    }, "the scenario no longer exercises every kind of sweep: fix it before trusting the rest"


# --- Cloud Scheduler ------------------------------------------------------------------------


def _job(terraform: TerraformConfig) -> dict[str, Any]:
    assert terraform.resource_file[("google_cloud_scheduler_job", "sweep")] == "scheduler.tf"
    return terraform.resource("google_cloud_scheduler_job", "sweep")


def test_scheduler_posts_to_the_apis_sweep_route(terraform: TerraformConfig) -> None:
    app = create_app(Settings(api_auth="none"))
    path = str(app.url_path_for(sweep_runs.__name__))
    methods = {method.upper() for method in app.openapi()["paths"][path]}
    target = block(_job(terraform), "http_target")
    assert target["uri"] == f"{API_URI}{path}"
    assert target["http_method"] in methods
    assert "body" not in target and "?" not in target["uri"], (
        "no stale_seconds override: the api's ACKLOOP_SWEEP_STALE_SECONDS applies"
    )
    assert "oauth_token" not in target


def test_scheduler_signs_with_the_sweeper_for_the_api_url(terraform: TerraformConfig) -> None:
    token = block(block(_job(terraform), "http_target"), "oidc_token")
    assert token["service_account_email"] == f"${{{SWEEPER}[0].email}}"
    # Cloud Run accepts its own URL as audience; anything else needs custom audiences.
    assert token["audience"] == API_URI
    account = terraform.resource("google_service_account", "sweeper")
    assert account["account_id"] == "ackloop-sweeper"
    assert terraform.resource_file[("google_service_account", "sweeper")] == "service_accounts.tf"


def test_scheduler_runs_on_the_sweep_variables(terraform: TerraformConfig) -> None:
    job = _job(terraform)
    assert job["schedule"] == "${var.sweep.schedule}"
    assert job["time_zone"] == "${var.sweep.time_zone}"
    assert job["region"] == "${coalesce(var.sweep.region, var.region)}"
    assert terraform.variable_default("sweep", "schedule") == "* * * * *"
    assert terraform.variable_default("sweep", "enabled") is True
    for kind, name in [("google_cloud_scheduler_job", "sweep"),
                       ("google_service_account", "sweeper"),
                       ("google_cloud_run_v2_service_iam_member", "sweeper_invokes_api")]:
        assert terraform.resource(kind, name)["count"] == ENABLED, f"{kind}.{name}"


def test_attempt_deadline_fits_scheduler_and_the_api_timeout(terraform: TerraformConfig) -> None:
    job = _job(terraform)
    assert job["attempt_deadline"] == "${local.sweep_attempt_deadline_seconds}s"
    local = expression(terraform.locals["sweep_attempt_deadline_seconds"])
    match = re.fullmatch(r"min\(local\.request_timeout_seconds\.api, (\d+)\)", local)
    assert match, local
    low, high = SCHEDULER_DEADLINE
    assert int(match.group(1)) == high
    api_timeout = delivery_numbers()["request_timeout_seconds"]["api"]
    assert low <= min(api_timeout, high) <= api_timeout
    conditions = [p["condition"] for p in block(job, "lifecycle")["precondition"]]
    assert f"${{local.sweep_attempt_deadline_seconds >= {low}}}" in conditions


def test_scheduler_waits_for_its_api_and_its_permission(terraform: TerraformConfig) -> None:
    assert "cloudscheduler.googleapis.com" in str(terraform.locals["required_apis"])
    depends_on = _job(terraform)["depends_on"]
    assert "${google_project_service.required}" in depends_on
    assert "${google_cloud_run_v2_service_iam_member.sweeper_invokes_api}" in depends_on


def test_the_sweeper_is_scheduled_only_where_the_api_can_let_it_through(
    terraform: TerraformConfig,
) -> None:
    """Cloud Scheduler can send only its OIDC token, whose signature Cloud Run strips: the api
    is told the sweeper's identity only under api.auth "cloud_run_iam" (which trusts the claims
    Cloud Run checked), and the job refuses "bearer" and "google_id_token", which accept only a
    token the api verifies itself (under "none" anyone may sweep)."""
    preconditions = block(_job(terraform), "lifecycle")["precondition"]
    [auth] = [p for p in preconditions if "var.api.auth" in p["condition"]]
    assert auth["condition"] == '${contains(["cloud_run_iam", "none"], var.api.auth)}'
    assert "ackloop runs sweep" in auth["error_message"]
    env = terraform.locals["optional_service_env"]
    assert env["ACKLOOP_API_SWEEPER_EMAIL"] == (
        f'${{var.api.auth == "cloud_run_iam" ? one({SWEEPER}[*].email) : null}}')
    app = create_app(Settings(api_auth="none"))
    assert str(app.url_path_for(sweep_runs.__name__)) == SWEEP_PATH


def _sweeper_token(email: str) -> str:
    """A token as Cloud Run forwards it: verified in front, signature removed."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    claims = {"iss": "https://accounts.google.com", "aud": "https://ackloop-api.example.run.app",
              "email": email, "email_verified": True, "sub": "42",
              "exp": int(time.time()) + 600}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.SIGNATURE_REMOVED_BY_GOOGLE"


def test_the_api_sweeps_for_the_sweeper_as_terraform_configures_it(tmp_path: Path) -> None:
    """Under cloud_run_iam (where Terraform names the sweeper) its forwarded token sweeps; under
    bearer the same token, which nothing in the app can verify, is refused."""
    token_file = tmp_path / "token"
    token_file.write_text("a-bearer-token-of-the-operator")
    sweeper = "ackloop-sweeper@proj.iam.gserviceaccount.com"
    iam = Settings(api_auth="cloud_run_iam", api_sweeper_email=sweeper)
    bearer = Settings(api_auth="bearer", api_bearer_token_file=str(token_file),
                      api_sweeper_email=sweeper,
                      api_id_token_audience="https://ackloop-api.example.run.app")
    for settings, expected in ((iam, 200), (bearer, 401)):
        deps = Deps(settings=settings, store=AgentStore(cast(Any, MemoryDocumentDB()), PREFIX),
                    publisher=MemoryPublisher(), model=cast(Any, None), agents=AgentRegistry(),
                    clock=ManualClock(), owner="sweeper-test")

        async def the_deps(deps: Deps = deps) -> Deps:
            return deps

        app = create_app(settings, deps=the_deps)
        with TestClient(app) as client:
            swept = client.post("/sweep",
                                headers={"Authorization": f"Bearer {_sweeper_token(sweeper)}"})
            other = client.post("/sweep", headers={
                "Authorization": f"Bearer {_sweeper_token('someone@example.com')}"})
        assert swept.status_code == expected, (settings.api_auth, swept.text)
        assert other.status_code in (401, 403), settings.api_auth


# --- IAM ------------------------------------------------------------------------------------


def test_the_sweeper_may_invoke_only_the_api(terraform: TerraformConfig) -> None:
    granted = {
        key: body for key, body in terraform.resources.items()
        if SWEEPER in str(body.get("member", "")) + str(body.get("members", ""))
    }
    assert set(granted) == {("google_cloud_run_v2_service_iam_member", "sweeper_invokes_api")}
    (binding,) = granted.values()
    assert binding["role"] == "roles/run.invoker"
    assert binding["name"] == '${google_cloud_run_v2_service.service["api"].name}'
    assert binding["member"] == f"${{{SWEEPER}[0].member}}"
    assert "for_each" not in binding


def test_the_api_may_publish_what_the_sweeper_sends(terraform: TerraformConfig) -> None:
    sent = swept().topics
    assert sent, "the sweep published nothing"
    publishes = terraform.locals["publishes"]["api"]
    assert sent <= set(publishes), f"the api may not publish to {sorted(sent - set(publishes))}"
    # Starting a run, cancelling one and sweeping all send outbox entries: any of their topics.
    assert set(get_args(Topic)) <= set(publishes)
    binding = terraform.resource("google_pubsub_topic_iam_member", "service_publishes")
    assert binding["for_each"] == "${local.publisher_bindings}"


# --- Firestore ------------------------------------------------------------------------------


def _declared_indexes(terraform: TerraformConfig) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every composite index as (collection, ((field, order), ...)), for_each expanded."""
    declared = set()
    for body in terraform.resources_of("google_firestore_index").values():
        assert body["database"] == "${local.firestore_database}"
        assert body.get("query_scope", "COLLECTION") == "COLLECTION"
        each = {"": ""}
        if "for_each" in body:
            each = terraform.locals[expression(body["for_each"]).removeprefix("local.")]
        for key, value in each.items():
            fields = tuple(
                (str(f["field_path"]).replace("${each.value}", value)
                 .replace("${each.key}", key), f["order"])
                for f in body["fields"]
            )
            declared.add((body["collection"], fields))
    return declared


def test_indexes_cover_the_sweepers_queries(terraform: TerraformConfig) -> None:
    queries = swept().queries
    assert queries, "the sweeper issued no query"
    declared = _declared_indexes(terraform)
    for query in queries:
        assert query.collection.startswith(PREFIX), f"{query.collection} ignores the prefix"
        collection = "${var.collection_prefix}" + query.collection.removeprefix(PREFIX)
        needed = (collection, ((query.field_name, "ASCENDING"), (query.order_by, "ASCENDING")))
        assert needed in declared, f"no composite index for {query}"
    # One index per field the sweeper orders on (any status): none left over.
    orders = terraform.locals["sweeper_run_orders"]
    assert {q.order_by for q in queries} == set(orders.values())
    assert {q.value for q in queries} == {"running", "queued"}


def test_indexes_cover_the_sweepers_newest_first_queries(terraform: TerraformConfig) -> None:
    """The schedules' due query: equality filters, then the newest first."""
    newest = swept().newest
    assert newest, "the sweeper asked for no due schedules"
    declared = _declared_indexes(terraform)
    for collection, equal, order_by in newest:
        assert collection.startswith(PREFIX), f"{collection} ignores the prefix"
        fields = (*((name, "ASCENDING") for name in equal), (order_by, "DESCENDING"))
        needed = ("${var.collection_prefix}" + collection.removeprefix(PREFIX), fields)
        assert needed in declared, f"no composite index for {collection} {equal} {order_by}"


def test_the_sweeper_reads_nothing_else_that_needs_an_index() -> None:
    unknown = swept().methods - NO_INDEX_NEEDED
    assert not unknown, f"the sweeper calls {sorted(unknown)}: which index do they need?"
