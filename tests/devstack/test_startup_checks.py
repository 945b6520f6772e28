"""``dev up`` without surprises, with real processes and real ports: a port in use is refused
naming its owner before anything starts; readiness accepts only the child itself on its port;
a service that cannot start is named with its cause and its log, and nothing is left running;
the user's project is importable by the functions; the banner names the model they use."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ackloop_dev.devstack import ports
from ackloop_dev.devstack.emulators import free_port
from ackloop_dev.devstack.processes import ManagedProcess, StartupFailed, alive
from ackloop_dev.devstack.stack import LocalStack, StackOptions, isolated_env
from tests.support.emulators import EmulatorSession


def _ackloop(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ackloop", path=str(Path(sys.executable).parent))
    assert exe
    # COLUMNS=40: a line meant to be pasted must not be wrapped at the terminal's width.
    env = {**os.environ, "COLUMNS": "40"}
    return subprocess.run([exe, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket of this test process listening on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        yield s


def test_a_port_in_use_is_one_line_naming_its_owner_and_nothing_starts(
        listener: socket.socket, tmp_path: Path) -> None:
    busy = listener.getsockname()[1]
    directory = tmp_path / "stack"
    done = _ackloop("dev", "up", "--directory", str(directory), "--pubsub-port", str(busy),
                    "--firestore-port", str(free_port()), "--base-port", str(free_port()),
                    cwd=tmp_path, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    [line] = [line for line in output.splitlines() if f"port {busy} " in line]
    assert f"PID {os.getpid()} " in line and "pubsub-emulator" in line, output
    assert "Traceback" not in output
    # Nothing was started: every process gets a log file (and a state entry) when it starts.
    assert not (directory / "logs").exists() and not (directory / "state.json").exists()


def test_a_catalog_that_cannot_load_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    """``dev up`` loads the catalog the functions would load first: a package that is not
    there is the catalog's one line, exit code 1, and no emulator or function started."""
    directory = tmp_path / "stack"
    done = _ackloop("dev", "up", "--directory", str(directory), "--agents",
                    "nosuchproject.agents:catalog", "--pubsub-port", str(free_port()),
                    "--firestore-port", str(free_port()), "--base-port", str(free_port()),
                    cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "cannot start the stack: ACKLOOP_AGENTS=nosuchproject.agents:catalog: cannot import "
        "module 'nosuchproject.agents': ModuleNotFoundError: No module named 'nosuchproject'"]
    assert "Starting" not in done.stdout
    assert not (directory / "logs").exists() and not (directory / "state.json").exists()


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_readiness_is_the_child_itself_on_its_port_never_a_stranger(tmp_path: Path) -> None:
    stranger = ThreadingHTTPServer(("127.0.0.1", free_port()), _Ok)
    port = stranger.server_address[1]
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    try:
        # A child that never binds its port, while a stranger answers health checks there.
        child = ManagedProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"],
                               tmp_path / "sleeper.log", f"http://127.0.0.1:{port}/").start()
        try:
            assert httpx.get(f"http://127.0.0.1:{port}/").is_success
            with pytest.raises(StartupFailed) as failed:
                child.wait_ready(3.0)
            assert f"port {port} is served by PID {os.getpid()}" in str(failed.value)
        finally:
            child.stop()
    finally:
        stranger.shutdown()
        stranger.server_close()
    own = free_port()
    server = ManagedProcess(
        "server", [sys.executable, "-m", "http.server", str(own), "--bind", "127.0.0.1"],
        tmp_path / "server.log", f"http://127.0.0.1:{own}/", cwd=tmp_path).start()
    try:
        server.wait_ready(30.0)
        assert server.pid is not None and ports.serves(own, server.pid) is True
    finally:
        server.stop()


def _project(tmp_path: Path) -> tuple[Path, str]:
    """A user's project directory with a package holding an agent catalog (the built-in
    agents, re-exported), importable only with the directory on PYTHONPATH."""
    package = f"userproj_{uuid.uuid4().hex[:8]}"
    (tmp_path / "project" / package).mkdir(parents=True)
    (tmp_path / "project" / package / "__init__.py").write_text("")
    (tmp_path / "project" / package / "agents.py").write_text(
        "from ackloop.agents.builtin import builtin_agents\n\n\n"
        "def catalog(settings, http):\n    return builtin_agents(settings, http)\n")
    return tmp_path / "project", f"{package}.agents:catalog"


class _Recording(LocalStack):
    """Remembers every process it started, to check none is left running."""

    def __init__(self, options: StackOptions) -> None:
        super().__init__(options)
        self.started: list[ManagedProcess] = []

    def _start(self, name: str, proc: ManagedProcess) -> ManagedProcess:
        self.started.append(proc)
        return super()._start(name, proc)


def _options(tmp_path: Path, emulators: EmulatorSession, **fields: object) -> StackOptions:
    tag = EmulatorSession.unique("b1")
    return StackOptions(
        directory=tmp_path / "stack", project_id=emulators.project_id,
        pubsub_port=emulators.pubsub_port, firestore_port=emulators.firestore_port,
        base_port=0, start_emulators=False, create_topology=False, sandbox_apis=False,
        sweep_every_s=None, extra_env=isolated_env(tag, emulators.project_id),
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.emulator
@pytest.mark.slow
def test_each_service_that_cannot_start_is_named_with_its_cause_and_log(
        emulator_session: EmulatorSession, tmp_path: Path) -> None:
    _, agents = _project(tmp_path)  # not on the path: its package cannot be imported
    stack = _Recording(_options(tmp_path, emulator_session, agents=agents))
    with pytest.raises(StartupFailed) as failed:
        stack.up(log=lambda _: None)
    package = agents.split(".")[0]
    lines = failed.value.lines
    assert len(lines) == len(StackOptions.services), lines
    for name, line in zip(sorted(StackOptions.services), sorted(lines), strict=True):
        assert line.startswith(f"{name} exited with code 1: "), line
        assert package in line and "ModuleNotFoundError" in line, line
        assert line.endswith(f"(log: {tmp_path / 'stack' / 'logs' / name}.log)"), line
    assert all(p.pid is not None and not alive(p.pid) for p in stack.started)
    assert not (tmp_path / "stack" / "state.json").exists()


@pytest.mark.emulator
@pytest.mark.slow
def test_the_users_project_is_importable_and_the_banner_names_the_model_the_functions_use(
        emulator_session: EmulatorSession, tmp_path: Path) -> None:
    project, agents = _project(tmp_path)
    options = _options(tmp_path, emulator_session, agents=agents, python_path=(project,),
                       services=("model_step",))
    # A key makes the functions use Gemini (not called here): the banner must say so.
    options.extra_env["ACKLOOP_GEMINI_API_KEY"] = "local-test-key"
    stack = LocalStack(options)
    state = stack.up(log=lambda _: None)
    try:
        health = httpx.get(f"http://127.0.0.1:{state.ports['model_step']}/", timeout=10).json()
        assert health["model"] == "gemini" == state.model_provider
        assert state.model.startswith("Gemini gemini-3-flash-preview with an API key"), state
        assert "scripted" not in state.model
        log = Path(state.logs["model_step"]).read_text()
        # The user's catalog (the built-in agents, re-exported) was loaded.
        assert "ackloop process ready" in log and "'default'" in log, log
    finally:
        stack.down()


@pytest.mark.emulator
@pytest.mark.slow
def test_a_second_stack_is_refused_without_touching_the_first_and_status_tells_each_process(
        tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    pubsub, firestore = free_port(), free_port()
    ports_args = ("--pubsub-port", str(pubsub), "--firestore-port", str(firestore))
    up = _ackloop("dev", "up", "--emulators-only", "--directory", str(first), *ports_args,
                  cwd=tmp_path)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        export = (f"export PUBSUB_EMULATOR_HOST=127.0.0.1:{pubsub} "
                  f"FIRESTORE_EMULATOR_HOST=127.0.0.1:{firestore}")
        assert export in up.stdout.splitlines(), up.stdout  # whole, on one line
        recorded = json.loads((first / "state.json").read_text())["pids"]

        again = _ackloop("dev", "up", "--emulators-only", "--directory", str(second),
                         *ports_args, cwd=tmp_path)
        output = again.stdout + again.stderr
        assert again.returncode == 1, output
        [line] = [line for line in output.splitlines() if f"port {pubsub} " in line]
        assert f"PID {recorded['pubsub-emulator']} " in line, output
        assert not (second / "logs").exists()

        same = _ackloop("dev", "up", "--emulators-only", "--directory", str(first),
                        *ports_args, cwd=tmp_path)
        assert same.returncode == 1
        assert f"already running from {first}" in same.stderr, same.stderr

        status = _ackloop("dev", "status", "--json", "--directory", str(first), cwd=tmp_path)
        assert status.returncode == 0, status.stdout + status.stderr
        rows = {row["name"]: row for row in json.loads(status.stdout)["processes"]}
        assert {name: row["pid"] for name, row in rows.items()} == recorded
        assert rows["pubsub-emulator"]["port"] == pubsub and rows["pubsub-emulator"]["up"]
        assert rows["firestore-emulator"]["log"].endswith("firestore-emulator.log")

        os.kill(recorded["firestore-emulator"], 9)
        down = _ackloop("dev", "status", "--directory", str(first), cwd=tmp_path)
        assert down.returncode == 1
        [line] = [line for line in down.stdout.splitlines() if "firestore-emulator" in line]
        assert "DOWN" in line and f"pid {recorded['firestore-emulator']}" in line, down.stdout
    finally:
        _ackloop("dev", "down", "--directory", str(first), cwd=tmp_path)
    assert not any(alive(pid) for pid in recorded.values())
