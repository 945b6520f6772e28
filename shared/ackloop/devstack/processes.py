"""Starting and stopping local server processes: logs to files, readiness by HTTP, stop by PID.

Output always goes to a file: a child writing into a pipe that nobody drains blocks after
~64 KB (the JVM emulators are chatty).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx


class StartupError(RuntimeError):
    pass


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
        """Poll the health URL until it answers 2xx; return the seconds it took."""
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise StartupError(
                    f"{self.name} exited with {self.process.returncode}; see {self.log_path}:\n"
                    + tail(self.log_path)
                )
            if self.health_url is None:
                return time.monotonic() - started
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.health_url, timeout=1.0).is_success:
                    return time.monotonic() - started
            time.sleep(0.05)
        raise StartupError(f"{self.name} not ready after {timeout:.0f} s; see {self.log_path}")

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


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
