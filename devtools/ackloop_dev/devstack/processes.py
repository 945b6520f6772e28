"""Starting and stopping local server processes: logs to files, readiness by HTTP (from the
process itself, not a stranger on its port), the cause of a failed start, stop by PID.

Output always goes to a file: a child writing into a pipe that nobody drains blocks after
~64 KB (the JVM emulators are chatty).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx

from ackloop.hosting.startup import LOGGER as STARTUP_LOGGER
from ackloop.hosting.startup import PREFIX as STARTUP_PREFIX
from ackloop_dev.devstack import ports


class StartupError(RuntimeError):
    pass


class StartupFailed(StartupError):
    """Processes that did not start: one line each (its name, the cause, its log)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


SETTLE_SECONDS = 2.0
"""After a first failure, how long the others still starting are watched: services that fail
for one cause (an agent catalog they all import) fail within moments of each other, and each is
named, instead of only the first."""


@dataclass
class ManagedProcess:
    name: str
    argv: Sequence[str]
    log_path: Path
    health_url: str | None = None
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
                start_new_session=True,  # its own process group: stopped with its children
            )
        finally:
            log.close()
        return self

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Wait until this process serves its health URL; return the seconds it took.

        Raises :class:`StartupFailed` at once if it exits, or when ``timeout`` runs out.
        """
        return wait_all([self], timeout)[self.name]

    def probe(self) -> Literal["exited", "ready", "starting"]:
        """Where this process is: exited; ready (its health URL answers 2xx and the server
        answering is this process, not a stranger on its port); or still starting."""
        if self.process is not None and self.process.poll() is not None:
            return "exited"
        if self.health_url is None:
            return "ready"
        try:
            if not httpx.get(self.health_url, timeout=1.0).is_success:
                return "starting"
        except httpx.HTTPError:
            return "starting"
        if self.pid is not None and ports.serves(self.port(), self.pid) is False:
            return "starting"
        return "ready"

    def port(self) -> int:
        assert self.health_url is not None
        port = urlsplit(self.health_url).port
        assert port is not None, self.health_url
        return port

    def failure(self, timeout: float | None = None) -> str:
        """One line: why this process did not start (from its log), and where its log is."""
        if timeout is None:
            assert self.process is not None
            what = f"exited with code {self.process.returncode}: {cause(self.log_path)}"
        else:
            what = f"not ready after {timeout:.0f} s"
            if self.health_url is not None and self.pid is not None and \
                    ports.serves(self.port(), self.pid) is False and ports.in_use(self.port()):
                what += (f": port {self.port()} is served by "
                         f"{ports.describe_owner(self.port())}, not by it")
        return f"{self.name} {what}  (log: {self.log_path})"

    def kill(self) -> None:
        """SIGKILL the process group (a crash, for tests)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 5.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        stop_pid(self.process.pid, timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1.0)


def stop_together(stops: Sequence[Callable[[], None]]) -> None:
    """Run ``stops`` at once, each in a thread of its own, and return when all have: a
    process takes its time to exit after SIGTERM (its server's graceful shutdown), and a
    stack's processes need not wait for one another's."""
    if len(stops) <= 1:
        for stop in stops:
            stop()
        return
    with ThreadPoolExecutor(max_workers=len(stops)) as pool:
        for done in [pool.submit(stop) for stop in stops]:
            done.result()


def stop_pid(pid: int, timeout: float = 5.0) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL it if it lingers."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def wait_all(processes: Sequence[ManagedProcess], timeout: float) -> dict[str, float]:
    """Wait until every process is ready; return each one's seconds to ready.

    Stops waiting as soon as one exits (after :data:`SETTLE_SECONDS` for the others) or when
    ``timeout`` runs out, and raises :class:`StartupFailed` naming each process that exited or
    was not ready.
    """
    started = time.monotonic()
    pending, ready, failed = list(processes), {}, []
    first_failure: float | None = None
    while pending:
        for proc in list(pending):
            state = proc.probe()
            if state == "starting":
                continue
            pending.remove(proc)
            if state == "ready":
                ready[proc.name] = time.monotonic() - started
            else:
                failed.append(proc.failure())
                first_failure = first_failure or time.monotonic()
        now = time.monotonic()
        if first_failure is not None and now - first_failure >= SETTLE_SECONDS:
            break
        if now - started >= timeout:
            failed += [proc.failure(timeout) for proc in pending]
            break
        if pending:
            time.sleep(0.05)
    if failed:
        raise StartupFailed(failed)
    return ready


def cause(log_path: Path) -> str:
    """The line of a process's log that says why it stopped: its start-up failure line
    (:mod:`ackloop.hosting.startup`), else the last line naming an error or exception, else its last
    line."""
    try:
        lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines()
                 if line.strip()]
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and entry.get("logger") == STARTUP_LOGGER:
                return str(entry.get("message", line)).removeprefix(STARTUP_PREFIX)
    named = [line for line in lines if _ERROR.search(line)]
    last = (named or lines or ["(empty log)"])[-1]
    return last if len(last) <= 300 else last[:297] + "..."


_ERROR = re.compile(r"(Error|Exception)\b|\berror\b")
