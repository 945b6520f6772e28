"""The local stack behind ``ackloop dev up``: emulators, topology, tool sandbox, functions, and
the push delivery (:mod:`ackloop_dev.devstack.push_delivery`) unless the emulator pushes itself.

Every function is started with the same entrypoint the container image uses (``ackloop run``
with ``FUNCTION_TARGET``), bound to 127.0.0.1, logging to files under the stack's directory.
The stack's state (PIDs, ports, environment) is kept in ``state.json`` there, so ``dev down``
stops exactly what ``dev up`` started, by PID.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

import ackloop
from ackloop.bus.delivery import load_policy
from ackloop.cli.serving import COMBINED
from ackloop.config.settings import Settings
from ackloop.testing.localstack import STATE_FILE, StackState
from ackloop_dev.agents import CATALOG
from ackloop_dev.devstack import emulators, ports
from ackloop_dev.devstack.processes import (
    ManagedProcess,
    StartupFailed,
    alive,
    stop_pid,
    stop_together,
    wait_all,
)
from ackloop_dev.devstack.topology import PushMode, create_topology, routes

FUNCTIONS = ("ingest", "model_step", "tool_step", "dead_letter")
STEPS = "steps"
"""The one service that serves every step kind, each under ``/<kind>`` (FUNCTION_TARGET=steps)."""
SERVICES = (*FUNCTIONS, "api")
"""The services of a stack with a service per step kind (the test stacks')."""
PORT_ORDER = (*SERVICES, STEPS)
"""Every service a stack may run, in the order of their ports from ``base_port``."""
LAYOUTS = {"steps": (STEPS, "api"), "per_step": (*FUNCTIONS, "api")}
"""The services of each deployment layout (``infra/layout.tf``; ``steps`` is the default
deployment's and ``ackloop dev up``'s)."""
PUSH_DELIVERY = "push-delivery"
SCHEDULER = "scheduler"
TASK_QUEUE = "task-queue"
"""The stand-in for the Cloud Tasks wake queue (infra/wakes.tf)."""
WAKE_QUEUE = "ackloop-wakes"


def isolated_env(tag: str, project: str) -> dict[str, str]:
    """Settings that give a stack topics and collections of its own, named after ``tag``.

    Pub/Sub has no reset and the emulators are shared, so tests, benchmarks and chaos runs
    isolate each stack by name instead.
    """
    return {
        "ACKLOOP_PROJECT_ID": project,
        "GOOGLE_CLOUD_PROJECT": project,
        "ACKLOOP_QUERIES_TOPIC": f"{tag}-queries",
        "ACKLOOP_MODEL_STEPS_TOPIC": f"{tag}-model-steps",
        "ACKLOOP_TOOL_STEPS_TOPIC": f"{tag}-tool-steps",
        "ACKLOOP_ANSWERS_TOPIC": f"{tag}-answers",
        "ACKLOOP_DEAD_LETTER_TOPIC": f"{tag}-dead-letter",
        "ACKLOOP_COLLECTION_PREFIX": tag.replace("-", "_").lower() + "_",
    }


def project_root() -> Path:
    """The checkout holding ``functions/`` (the stack runs from a source checkout)."""
    if env := os.environ.get("ACKLOOP_PROJECT_ROOT"):
        return Path(env)
    root = Path(ackloop.__file__).resolve().parents[2]
    if not (root / "functions").is_dir():
        raise RuntimeError(
            f"functions/ not found next to the ackloop package ({root}); run from a checkout "
            "installed with `pip install -e .`, or set ACKLOOP_PROJECT_ROOT"
        )
    return root


def ackloop_command() -> list[str]:
    exe = shutil.which("ackloop", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "ackloop.cli.entry"]


@dataclass
class StackOptions:
    directory: Path
    project_id: str = "ackloop-local"
    pubsub_port: int = 8085
    firestore_port: int = 8086
    storage_port: int = 0
    """The Cloud Storage emulator's port (0: a free one), started with the other two."""
    files_bucket: str = emulators.FILES_BUCKET
    base_port: int = 8090
    sandbox_apis: bool = True
    fake_gemini: bool = False
    fake_gemini_quota: tuple[int | None, int | None] = (None, None)
    """Requests and input tokens a minute the fake Gemini server allows (None: no limit)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    service_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Extra environment for one service only (fault points in tests, say)."""
    max_delivery_attempts: int = field(
        default_factory=lambda: load_policy().max_delivery_attempts)
    """Dead-letter policy of the step subscriptions (default: the delivery policy's)."""
    push: PushMode = "twin"
    """Who pushes: the push delivery process (production semantics) or the emulator itself."""
    push_time_scale: float = 1.0
    """The push delivery's one time factor (backoff, ack deadlines); 1 is production's."""
    sweep_every_s: float | None = 60.0
    """The local Cloud Scheduler job: POST the API's /sweep this often (as deployed, every
    minute); None: no sweeper."""
    start_emulators: bool = True
    """False: use the emulators already listening on ``pubsub_port`` / ``firestore_port``."""
    services: tuple[str, ...] = ("ingest", "model_step", "tool_step", "dead_letter", "api")
    create_topology: bool = True
    python_path: tuple[Path, ...] = ()
    """Directories put ahead on every child's PYTHONPATH: the user's project, so that the
    functions can import its agents and tools."""
    agents: str | None = None
    """``ACKLOOP_AGENTS`` for every child (else whatever the environment says)."""


class LocalStack:
    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.directory = options.directory
        self.processes: dict[str, ManagedProcess] = {}
        self.state: StackState | None = None

    # -- start ------------------------------------------------------------------------------

    def up(self, log: Callable[[str], object] = print) -> StackState:
        o = self.options
        # Before anything starts: a port in use is an error naming its owner, and nothing is
        # left behind.
        if busy := ports.taken(self.planned_ports()):
            raise StartupFailed(busy)
        self.directory.mkdir(parents=True, exist_ok=True)
        logs = self.directory / "logs"
        state = StackState(str(self.directory), o.project_id, o.pubsub_port, o.firestore_port)
        self.state = state
        try:
            started: list[ManagedProcess] = []
            if o.start_emulators:
                jars = emulators.find_jars()
                started += [
                    self._start(
                        "pubsub-emulator", emulators.pubsub_process(jars, o.pubsub_port, logs)
                    ),
                    self._start(
                        "firestore-emulator",
                        emulators.firestore_process(jars, o.firestore_port, logs),
                    ),
                ]
            storage = self._storage(state, logs, log)
            if storage is not None:
                started.append(storage)
            if o.sandbox_apis:
                port = self._port(o.base_port + 10)
                state.sandbox_url = f"http://127.0.0.1:{port}"
                started.append(self._start("sandbox-apis", ManagedProcess(
                    "sandbox-apis",
                    [sys.executable, "-m", "ackloop_dev.fakes.sandbox_apis", "--port", str(port)],
                    logs / "sandbox-apis.log", f"{state.sandbox_url}/",
                )))
            if o.fake_gemini:
                port = self._port(o.base_port + 11)
                state.fake_gemini_url = f"http://127.0.0.1:{port}"
                started.append(self._start("fake-gemini", ManagedProcess(
                    "fake-gemini",
                    [sys.executable, "-m", "ackloop_dev.fakes.gemini_server", "--port", str(port),
                     "--policy", "catalog", *quota_flags(o.fake_gemini_quota)],
                    logs / "fake-gemini.log", f"{state.fake_gemini_url}/",
                )))
            ready = wait_all(started, 60.0)
            for proc in started:
                log(f"  {proc.name:<20} ready in {ready[proc.name]:.1f} s  "
                    f"(log: {proc.log_path})")
            if state.files_bucket:
                emulators.ensure_bucket(state.storage_env()["STORAGE_EMULATOR_HOST"],
                                        state.files_bucket, o.project_id)
                log(f"  files bucket         gs://{state.files_bucket} on "
                    f"{state.storage_env()['STORAGE_EMULATOR_HOST']}")
            os.environ.update(state.client_env())
            self._wake_queue(log)
            state.env = self.service_env(state) | self.served_catalog()
            state.agents = state.env.get("ACKLOOP_AGENTS")
            state.python_path = [str(p) for p in o.python_path]
            for i, name in enumerate(PORT_ORDER):
                state.ports[name] = self._port(o.base_port + i)
            if o.create_topology:
                create_topology(
                    self.settings(), self.endpoints(),
                    max_delivery_attempts=o.max_delivery_attempts, push=o.push,
                )
                log(f"  topics and push subscriptions created (pushed by: {o.push})")
            for name in o.services:
                self.start_service(name)
            ready = wait_all([self.processes[name] for name in o.services], 60.0)
            for name in o.services:
                log(f"  {name:<20} ready in {ready[name]:.1f} s  "
                    f"(http://127.0.0.1:{state.ports[name]})")
            if o.create_topology and o.push == "twin":
                took = self.start_push_delivery(self.options.push_time_scale).wait_ready(60.0)
                log(f"  {PUSH_DELIVERY:<20} ready in {took:.1f} s  "
                    f"(log: {self.processes[PUSH_DELIVERY].log_path})")
            if o.sweep_every_s is not None and "api" in o.services:
                took = self.start_scheduler(o.sweep_every_s).wait_ready(30.0)
                log(f"  {SCHEDULER:<20} ready in {took:.1f} s  (POST /sweep every "
                    f"{o.sweep_every_s:g} s; log: {self.processes[SCHEDULER].log_path})")
            settings = self.service_settings()
            state.model_provider = settings.resolved_model_provider()
            state.model = describe_model(settings, state.fake_gemini_url)
            state.save()
            return state
        except BaseException:
            self.down()
            (self.directory / STATE_FILE).unlink(missing_ok=True)
            raise

    def _storage(self, state: StackState, logs: Path, log: Callable[[str], object]
                 ) -> ManagedProcess | None:
        """Start the Cloud Storage emulator with the other emulators (its objects under
        ``storage/``), or use the one ``STORAGE_EMULATOR_HOST`` names when reusing them; the
        stack's files bucket is on it. Without one, the functions keep files in memory."""
        o = self.options
        if not o.start_emulators:
            host = os.environ.get("STORAGE_EMULATOR_HOST")
            port = urlsplit(host if "://" in (host or "") else f"http://{host}").port
            if host and port:
                state.storage_port, state.files_bucket = port, o.files_bucket
            return None
        if (why := emulators.storage_available()) is not None:
            log(f"  storage-emulator     not started: {why}; files stay in each process's "
                "memory")
            return None
        port = o.storage_port or emulators.free_port()
        state.storage_port, state.files_bucket = port, o.files_bucket
        return self._start("storage-emulator", emulators.storage_process(
            port, logs, self.directory / "storage", o.files_bucket))

    def planned_ports(self) -> dict[str, int]:
        """The fixed ports :meth:`up` will listen on, by what will use them (none for ports it
        picks itself, ``base_port=0``; none for emulators it reuses)."""
        o = self.options
        planned: dict[str, int] = {}
        if o.start_emulators:
            planned |= {"pubsub-emulator": o.pubsub_port, "firestore-emulator": o.firestore_port}
            if o.storage_port:
                planned["storage-emulator"] = o.storage_port
        if o.base_port == 0:
            return planned
        planned |= {name: o.base_port + i for i, name in enumerate(PORT_ORDER)
                    if name in o.services}
        extras = {"sandbox-apis": (10, o.sandbox_apis), "fake-gemini": (11, o.fake_gemini),
                  PUSH_DELIVERY: (12, o.create_topology and o.push == "twin"),
                  SCHEDULER: (13, o.sweep_every_s is not None and "api" in o.services),
                  TASK_QUEUE: (14, o.create_topology)}
        return planned | {name: o.base_port + offset
                          for name, (offset, used) in extras.items() if used}

    def project_env(self) -> dict[str, str]:
        """What every child gets to import the user's project: its directories ahead on
        PYTHONPATH, and the agent catalog it names."""
        env: dict[str, str] = {}
        if self.options.python_path:
            inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            env["PYTHONPATH"] = os.pathsep.join(
                [*(str(p) for p in self.options.python_path), *inherited])
        return env | self.served_catalog()

    def served_catalog(self) -> dict[str, str]:
        """The ``ACKLOOP_AGENTS`` every function gets ahead of the stack's own (the one its
        state records), when the options name one."""
        return {"ACKLOOP_AGENTS": self.options.agents} if self.options.agents else {}

    def catalog_env(self) -> dict[str, str]:
        """The environment the functions load their agent catalog in (the development catalog,
        or the one the options or the environment name; the project on PYTHONPATH), as
        :meth:`start_service` gives it: for :func:`ackloop_dev.devstack.catalog_check.refusal`."""
        return {**os.environ, "ACKLOOP_AGENTS": CATALOG, **self.options.extra_env,
                **self.project_env()}

    def service_settings(self) -> Settings:
        """The settings the services read: this process's environment under the stack's, as
        :meth:`start_service` hands it to them (what the banner describes, not a guess)."""
        assert self.state is not None
        saved = dict(os.environ)
        os.environ.update({**self.state.env, **self.project_env()})
        try:
            return Settings()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def _port(self, wanted: int) -> int:
        return emulators.free_port() if self.options.base_port == 0 else wanted

    def settings(self) -> Settings:
        """The settings naming this stack's project and topics (what its functions use). The
        project goes by its variable's name: a ``project_id`` key would be ignored for
        whatever ``ACKLOOP_PROJECT_ID`` this process has."""
        return Settings.model_validate({"ACKLOOP_PROJECT_ID": self.options.project_id,
                                        **self._topic_overrides()})

    def endpoints(self) -> dict[str, str]:
        """Each function's URL (ports are assigned by :meth:`up`): its own service's, or, when
        the stack runs the steps service instead, the steps service's path named after it."""
        assert self.state is not None
        ports = self.state.ports
        combined = STEPS in self.options.services
        return {n: f"http://127.0.0.1:{ports[STEPS]}/{n}"
                if combined and n not in self.options.services
                else f"http://127.0.0.1:{ports[n]}/" for n in FUNCTIONS}

    def start_push_delivery(self, time_scale: float = 1.0) -> ManagedProcess:
        """Start the push delivery for this stack's subscriptions (it takes them over from the
        emulator's own push); ready once it serves ``GET /_stats``."""
        assert self.state is not None
        state = self.state
        port = state.ports.get(PUSH_DELIVERY) or self._port(self.options.base_port + 12)
        state.ports[PUSH_DELIVERY] = port
        config = self.directory / "push-delivery.json"
        config.write_text(json.dumps({
            "project": self.options.project_id,
            "routes": {r.subscription: r.endpoint
                       for r in routes(self.settings(), self.endpoints())},
            "time_scale": time_scale,
            "stats_port": port,
        }, indent=2))
        proc = ManagedProcess(
            PUSH_DELIVERY,
            [sys.executable, "-m", "ackloop_dev.devstack.push_delivery", "--config", str(config)],
            self.directory / "logs" / f"{PUSH_DELIVERY}.log",
            f"http://127.0.0.1:{port}/_stats",
            env={**os.environ, **state.client_env()},
        )
        return self._start(PUSH_DELIVERY, proc)

    def start_scheduler(self, every_s: float) -> ManagedProcess:
        """Start the local stand-in for the Cloud Scheduler sweep job (infra/scheduler.tf)."""
        assert self.state is not None
        state = self.state
        port = state.ports.get(SCHEDULER) or self._port(self.options.base_port + 13)
        state.ports[SCHEDULER] = port
        proc = ManagedProcess(
            SCHEDULER,
            [sys.executable, "-m", "ackloop_dev.devstack.scheduler", "--url",
             f"http://127.0.0.1:{state.ports['api']}/sweep", "--every", f"{every_s:g}",
             "--stats-port", str(port)],
            self.directory / "logs" / f"{SCHEDULER}.log",
            f"http://127.0.0.1:{port}/_stats",
            env=dict(os.environ),
        )
        return self._start(SCHEDULER, proc)

    def _wake_queue(self, log: Callable[[str], object]) -> None:
        """The task queue, for a stack that lays out its topology (its services arm wakes)."""
        if self.options.create_topology:
            took = self.start_task_queue().wait_ready(30.0)
            log(f"  {TASK_QUEUE:<20} ready in {took:.1f} s  (wakes; log: "
                f"{self.processes[TASK_QUEUE].log_path})")

    def start_task_queue(self) -> ManagedProcess:
        """Start the wake queue's stand-in (:mod:`ackloop_dev.devstack.task_queue`); the
        services arm their wakes there (:meth:`service_env`). Its tasks are kept in the stack's
        directory, so a queue started again still holds them."""
        assert self.state is not None
        port = self.state.ports.get(TASK_QUEUE) or self._port(self.options.base_port + 14)
        self.state.ports[TASK_QUEUE] = port
        proc = ManagedProcess(
            TASK_QUEUE,
            [sys.executable, "-m", "ackloop_dev.devstack.task_queue", "--port", str(port),
             "--state", str(self.directory / "task-queue.jsonl")],
            self.directory / "logs" / f"{TASK_QUEUE}.log",
            f"http://127.0.0.1:{port}/_stats",
            env=dict(os.environ),
        )
        return self._start(TASK_QUEUE, proc)

    def stop_push_delivery(self) -> None:
        """Stop the push delivery (it hands its held messages back to the emulator)."""
        proc = self.processes.pop(PUSH_DELIVERY, None)
        if proc is not None:
            proc.stop()
        if self.state is not None:
            self.state.pids.pop(PUSH_DELIVERY, None)
            self.state.save()

    def push_stats(self) -> dict[str, Any]:
        """The push delivery's counters (``GET /_stats``): answers by status, redeliveries,
        dead letters, windows, pushes in flight, per subscription."""
        assert self.state is not None
        url = f"http://127.0.0.1:{self.state.ports[PUSH_DELIVERY]}/_stats"
        stats: dict[str, Any] = httpx.get(url, timeout=5.0).json()
        return stats

    def _topic_overrides(self) -> dict[str, str]:
        keys = ("queries_topic", "model_steps_topic", "tool_steps_topic", "answers_topic",
                "dead_letter_topic", "collection_prefix")
        env = self.options.extra_env
        return {k: env[f"ACKLOOP_{k.upper()}"] for k in keys if f"ACKLOOP_{k.upper()}" in env}

    def service_env(self, state: StackState) -> dict[str, str]:
        env = {
            **state.client_env(),
            "ACKLOOP_LOG_LEVEL": "INFO",
            # The benchmark's agents and the demos: served locally, never deployed (a user's
            # ACKLOOP_AGENTS, in the extra environment, replaces them).
            "ACKLOOP_AGENTS": CATALOG,
            # Each process appends its metrics there; `ackloop metrics` sums them.
            "ACKLOOP_METRICS_DIR": str(Path(state.directory) / "metrics"),
            # Each process appends its spans there; `ackloop runs trace` and /ui read them.
            "ACKLOOP_TRACE_DIR": str(Path(state.directory) / "traces"),
        }
        if TASK_QUEUE in state.ports:  # wakes go to the local task queue, as to Cloud Tasks
            env |= {"ACKLOOP_WAKE_QUEUE": f"projects/{state.project_id}/locations/local/"
                                          f"queues/{WAKE_QUEUE}",
                    "ACKLOOP_TASKS_EMULATOR_HOST": f"127.0.0.1:{state.ports[TASK_QUEUE]}"}
        if state.sandbox_url:
            env |= {
                "ACKLOOP_NWS_BASE_URL": state.sandbox_url,
                "ACKLOOP_IPAPI_BASE_URL": state.sandbox_url,
                "ACKLOOP_IP_ECHO_URL": f"{state.sandbox_url}/ip",
            }
        if state.fake_gemini_url:
            env |= {
                "ACKLOOP_MODEL_PROVIDER": "gemini",
                "ACKLOOP_GEMINI_BASE_URL": state.fake_gemini_url,
                "ACKLOOP_GEMINI_API_KEY": "local-fake-key",
            }
        return env | self.options.extra_env

    def start_service(self, name: str, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        assert self.state is not None
        state = self.state
        own = self.options.service_env.get(name, {})
        # As deployed (infra/run.tf): each service knows its own request timeout, which bounds
        # every wait it does inside a request; the steps service, the longest of its kinds'.
        timeouts = load_policy().request_timeout_s
        longest = max(timeouts[kind] for kind in COMBINED.get(name, (name,)))
        timeout = {"ACKLOOP_REQUEST_TIMEOUT_SECONDS": f"{longest:g}"}
        env = {**os.environ, **timeout, **state.env, **own, **(extra_env or {}),
               "FUNCTION_TARGET": name, "PORT": str(state.ports[name]), "ACKLOOP_HOST": "127.0.0.1"}
        # A process asked to crash at a named point runs with the crash points installed
        # around its dependencies (ackloop_dev.faults); the runtime itself has none.
        command = ([sys.executable, "-m", "ackloop_dev.faults", "run"]
                   if env.get("ACKLOOP_FAULT_CRASH_AT") else [*ackloop_command(), "run"])
        proc = ManagedProcess(
            name,
            command,
            self.directory / "logs" / f"{name}.log",
            f"http://127.0.0.1:{state.ports[name]}/" + ("healthz" if name == "api" else ""),
            env=env,
            cwd=project_root(),
        )
        return self._start(name, proc)

    def _start(self, name: str, proc: ManagedProcess) -> ManagedProcess:
        if project := self.project_env():
            proc.env = {**(proc.env if proc.env is not None else os.environ), **project}
        proc.start()
        self.processes[name] = proc
        if self.state is not None and proc.pid is not None:
            self.state.pids[name] = proc.pid
            self.state.logs[name] = str(proc.log_path)
            if proc.health_url:
                self.state.urls[name] = proc.health_url
            self.state.save()
        return proc

    def restart_service(self, name: str, extra_env: dict[str, str] | None = None) -> float:
        """Start ``name`` again (after a kill); returns seconds until it served its health check."""
        began = time.monotonic()
        self.start_service(name, extra_env).wait_ready(60.0)
        return time.monotonic() - began

    # -- stop -------------------------------------------------------------------------------

    def down(self) -> list[str]:
        stopped = list(reversed(self.processes))
        # What serves first, at once; then the emulators it used.
        for phase in (False, True):
            stop_together([self.processes[name].stop for name in stopped
                           if _is_emulator(name) is phase])
        self.processes.clear()
        return stopped


def stop_recorded(directory: Path) -> list[str]:
    """Stop the processes a previous ``dev up`` recorded in ``state.json``, by PID."""
    state = StackState.load(directory)
    if state is None:
        return []
    running = [(name, pid) for name, pid in reversed(list(state.pids.items())) if alive(pid)]
    # What serves first, at once; then the emulators it used.
    for phase in (False, True):
        stop_together([functools.partial(stop_pid, pid) for name, pid in running
                       if _is_emulator(name) is phase])
    (directory / STATE_FILE).unlink(missing_ok=True)
    return [name for name, _ in running]


def _is_emulator(name: str) -> bool:
    return name.endswith("-emulator")


@dataclass(frozen=True)
class ProcessStatus:
    """One process of a recorded stack: up when alive and (where it can be told) listening on
    its port itself."""

    name: str
    pid: int
    up: bool
    port: int | None
    url: str | None
    log: str | None


def status(directory: Path) -> list[ProcessStatus]:
    """Every process ``dev up`` recorded in ``directory`` (empty if none)."""
    state = StackState.load(directory)
    if state is None:
        return []
    rows = []
    for name, pid in state.pids.items():
        url = state.urls.get(name)
        port = urlsplit(url).port if url else None
        up = alive(pid) and (port is None or ports.serves(port, pid) is not False)
        rows.append(ProcessStatus(name, pid, up, port, url, state.logs.get(name)))
    return rows


def quota_flags(quota: tuple[int | None, int | None]) -> list[str]:
    """The fake Gemini server's flags for a quota of (requests, input tokens) a minute."""
    rpm, tpm = quota
    return ([*(["--quota-rpm", str(rpm)] if rpm else []),
             *(["--quota-tpm", str(tpm)] if tpm else [])])


def describe_model(settings: Settings, fake_gemini_url: str | None = None) -> str:
    """The model ``settings`` make the functions use, and how it is reached."""
    if settings.resolved_model_provider() == "scripted":
        return ("the scripted offline model, playing each agent's script "
                "(no Gemini credentials configured)")
    if settings.gemini_base_url and settings.gemini_base_url == fake_gemini_url:
        return (f"{settings.model} from the fake Gemini REST server at "
                f"{settings.gemini_base_url} (scripted replies, through google-genai)")
    if settings.use_vertexai:
        how = (f"on Vertex AI (project {settings.project_id}, "
               f"location {settings.vertex_location})")
    else:
        how = "with an API key (Gemini Developer API)"
    where = f" at {settings.gemini_base_url}" if settings.gemini_base_url else ""
    return f"Gemini {settings.model} {how}{where}"
