"""A throwaway PostgreSQL server on a loopback port, for the DBOS peer of ``ackloop bench``.

It uses the machine's PostgreSQL binaries (``initdb``, ``pg_ctl``: the newest version under
``/usr/lib/postgresql``, or ``ACKLOOP_PG_BIN``), a data directory of its own, and listens on
127.0.0.1 only, trusting local connections. PostgreSQL refuses to run as root, so when this
process is root the server runs as the ``postgres`` OS user. Stopped with ``pg_ctl stop``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path("/usr/lib/postgresql")
USER = "postgres"


class PostgresMissing(RuntimeError):
    """No PostgreSQL binaries on this machine."""


def pg_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, or None."""
    if env := os.environ.get("ACKLOOP_PG_BIN"):
        return Path(env)
    versions = sorted((p for p in _ROOT.glob("*/bin") if (p / "pg_ctl").exists()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return versions[-1] if versions else None


def _as_user(command: list[str]) -> list[str]:
    """``command`` run as :data:`USER` when this process is root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", USER, "--", *command]


@dataclass
class LocalPostgres:
    """A running server: ``url`` connects as the ``postgres`` superuser."""

    directory: Path
    port: int
    bin_dir: Path

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        """A connection string for database ``name`` (DBOS creates its system database)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{name}"

    @classmethod
    def start(cls, directory: Path, port: int) -> LocalPostgres:
        """``initdb`` into ``directory/data`` and start the server on ``port``; raises
        :class:`PostgresMissing` without the binaries."""
        bin_dir = pg_bin()
        if bin_dir is None:
            raise PostgresMissing(f"no PostgreSQL binaries under {_ROOT} (or ACKLOOP_PG_BIN)")
        directory.mkdir(parents=True, exist_ok=True)
        data, sockets = directory / "data", directory / "sockets"
        for path in (data, sockets):
            path.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam(USER)
            for path in (directory, data, sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
        subprocess.run(_as_user([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust",
                                 "-U", USER, "--no-sync"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        options = (f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=on "
                   "-c max_connections=300")
        subprocess.run(_as_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options,
                                 "-l", str(directory / "postgres.log"), "-w", "start"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return cls(directory, port, bin_dir)

    def pid(self) -> int:
        """The postmaster's PID (its first line of ``postmaster.pid``)."""
        return int((self.directory / "data" / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its files."""
        subprocess.run(_as_user([str(self.bin_dir / "pg_ctl"), "-D",
                                 str(self.directory / "data"), "-m", "fast", "-w", "stop"]),
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.directory / "data", ignore_errors=True)
