"""Starting a run from a query: once per request id, whatever the number of deliveries."""

from __future__ import annotations

import hashlib
import json
import logging

from ackloop.agents.agent import DEFAULT_AGENT
from ackloop.domain.cost import Cost
from ackloop.domain.errors import PermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import ANONYMOUS, RunLimits, RunRecord, RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.engine.outbox_entries import first_step
from ackloop.engine.outbox_sending import resend, send
from ackloop.engine.spend import metered, spent
from ackloop.files import FileLimits, QueryFiles, plan_query_files
from ackloop.telemetry import metrics, tracing
from ackloop.telemetry.context import update_log_context

log = logging.getLogger(__name__)


def request_hash(query: QueryMessage, files: list[JsonDict] | None = None) -> str:
    """Fingerprint of what was asked, to tell a retry from a reused request id. ``files``: the
    query's files as the run keeps them (a stored file's name is its digest)."""
    # An option left out is left out of the fingerprint, so adding options keeps old ones.
    opts = query.options
    unset = {name for name, left_out in (("approval_timeout_seconds",
                                          opts.approval_timeout_seconds is None),
                                         ("tenant", opts.tenant is None),
                                         ("priority", opts.priority == 0)) if left_out}
    body = query.model_dump_json(include={"text", "conversation_id", "agent", "options"},
                                 exclude={"options": unset} if unset else None)
    if files:  # likewise: a query without files keeps its fingerprint
        body += json.dumps(files, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def new_run(deps: Deps, query: QueryMessage, owner: str = ANONYMOUS,
            files: list[JsonDict] | None = None) -> RunRecord:
    """The run ``query`` starts; ``files``: its files as the run keeps them
    (:func:`planned_files`). A query may not name an internal agent
    (:class:`~ackloop.agents.agent.InternalAgent`, permanent): child runs and hand-offs, which
    reach
    one, do not start here."""
    agent = deps.agents.for_query(query.agent)
    settings = deps.settings
    opts = query.options
    if over := settings.over_ceiling(opts.max_steps, opts.max_seconds, opts.max_tool_calls):
        raise PermanentError(over, reason="over_ceiling")
    run_id = run_id_for_request(query.request_id, owner)

    def pick(*values: float | int | None) -> float | int | None:
        return next((v for v in values if v is not None), None)

    limits = RunLimits(
        max_steps=int(pick(opts.max_steps, agent.max_steps, settings.default_max_steps) or 1),
        max_seconds=float(
            pick(opts.max_seconds, agent.max_seconds, settings.default_max_seconds) or 1
        ),
        max_tool_calls=int(
            pick(opts.max_tool_calls, agent.max_tool_calls, settings.default_max_tool_calls) or 0
        ),
        max_tokens=(
            int(v)
            if (v := pick(opts.max_tokens, agent.max_tokens, settings.default_max_tokens))
            else None
        ),
        approval_timeout_seconds=opts.approval_timeout_seconds,
        tenant=opts.tenant,
        priority=opts.priority,
    )
    return RunRecord(
        run_id=run_id,
        request_id=query.request_id,
        request_hash=request_hash(query, files),
        conversation_id=query.conversation_id or run_id,
        agent=agent.name,
        text=query.text,
        files=list(files or []),
        model=agent.model or settings.model,
        created_at=deps.clock.now(),
        limits=limits,
        output_schema=opts.output_schema,
        owner=owner,
        # Within the query's span: the caller's trace when the query carried one.
        trace_id=tracing.current_trace_id() or tracing.run_trace_id(run_id),
    )


async def start_run(
    deps: Deps, query: QueryMessage, *, publish_failure_ok: bool = False, owner: str = ANONYMOUS
) -> tuple[RunRecord, bool]:
    """Create the run for ``query`` (or find it) and make sure its first step is on its way.

    A run for a busy conversation is stored ``queued`` (the active run's end starts it). A
    duplicate query whose first publish may have been lost (a crash right after the run was
    created) re-sends the first step unless that step has already been claimed.
    ``publish_failure_ok``: a run committed but not yet published is still a success: the first
    step is tried again a few times in the request (:data:`FIRST_PUBLISH_RETRIES`), then left
    to the sweeper; otherwise the failure is raised, for a redelivery.
    ``owner``: the caller, who alone may continue the run's conversation (see
    :func:`~ackloop.domain.keys.run_id_for_request`).
    """
    def costed(run: RunRecord, writes: int) -> Cost:
        starts = [first_step(run.run_id)] if run.status is RunStatus.RUNNING else []
        return spent(deps, model=None, usage=None, commit_writes=writes, outbox=starts)

    files = planned_files(deps, query)
    fresh = new_run(deps, query, owner, files.parts if files else None)  # refuses an internal
    if files is not None and files.inline and await deps.store.runs.admit(fresh) is None:
        # Stored only once nothing can refuse the query (see planned_files).
        await files.store()
    with metered(deps):  # a run created through the API: its request is the ingest
        run, created = await deps.store.runs.create_run(
            fresh, costed,
            continue_agent=query.agent == DEFAULT_AGENT and query.conversation_id is not None)
    update_log_context(run_id=run.run_id, agent=run.agent, conversation_id=run.conversation_id)
    if created:
        metrics.run_started(run.agent)
        tracing.record_run_root(run.run_id, run.trace_id or tracing.run_trace_id(run.run_id))
        log.info("run %s %s for request %s", run.run_id,
                 "queued" if run.status is RunStatus.QUEUED else "started", run.request_id)
    if run.status is not RunStatus.RUNNING:
        return run, created
    # A request that answers success is not redelivered (the API): it re-sends its own first
    # step a few times, within the request (Cloud Run gives a request CPU only until it
    # answers), before leaving it to the sweeper. A Pub/Sub delivery raises at once instead:
    # its redelivery is the retry.
    pauses = FIRST_PUBLISH_RETRIES if publish_failure_ok else ()
    for attempt in range(len(pauses) + 1):
        try:
            if created and attempt == 0:
                await send(deps, run.run_id, [first_step(run.run_id)])
            else:
                await resend(deps, run.run_id, [first_step(run.run_id)])
            return run, created
        except Exception:
            if not publish_failure_ok:
                raise
            if attempt < len(pauses):
                log.warning("run %s: first step not published; trying again in %.1f s",
                            run.run_id, pauses[attempt])
                await deps.clock.sleep(pauses[attempt])
    log.exception("run %s: first step not published; the sweeper will send it", run.run_id)
    return run, created


def planned_files(deps: Deps, query: QueryMessage) -> QueryFiles | None:
    """The query's files as its run keeps them (``file_data`` parts), checked, nothing stored
    yet. A file that breaks a limit raises :class:`~ackloop.files.FileRefused` (permanent: the
    query is poison, the API's answer 413, 415 or 422).

    The inline bytes are put in the file store after every other check that can refuse the
    query has passed (its ceilings in :func:`new_run`; the idempotency key, the conversation,
    its owner and its queue in :meth:`~ackloop.store.Runs.admit`) and before the run is
    committed, so no run names a file that is not stored yet. A query refused at the commit
    itself (a writer racing it: the same request id with another body, say) leaves its files
    stored but named by no run; the bucket's lifecycle rule deletes them with the rest. A
    duplicate of a created run stores nothing again."""
    if not query.files:
        return None
    return plan_query_files(deps.files, query.files, FileLimits.from_settings(deps.settings))


FIRST_PUBLISH_RETRIES = (0.2, 0.5, 1.0, 2.0)
"""Pauses between the API's tries of a run's first publish (3.7 s in all, in the request)."""
