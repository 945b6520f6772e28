"""Which process listens on a local TCP port, from ``/proc`` (Linux).

``dev up`` needs two answers: before it starts anything, whether a port it will use is taken and
by whom (an error naming the owner's PID beats a child that dies with "address already in
use"); and, while it waits for a child, whether the server answering on the child's port IS
that child (a health check alone accepts any server on the port: a stray one from an earlier
stack made ``dev up`` print "ready" for a service that had already died). Where ``/proc`` is
missing the owner is unknown (``None``), and readiness falls back to the health check and the
child being alive.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

_LISTEN = "0A"
"""The TCP state of a listening socket in ``/proc/net/tcp``."""


def in_use(port: int) -> bool:
    """Whether binding 127.0.0.1:``port`` fails, as it would for the server about to start
    (with ``SO_REUSEADDR``, like uvicorn and the emulators, so a closed connection lingering in
    TIME_WAIT does not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def listening_inodes(port: int) -> set[int] | None:
    """The inodes of the sockets listening on ``port`` (IPv4 and IPv6); None without /proc."""
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not tables[0].exists():
        return None
    inodes: set[int] = set()
    for table in tables:
        with contextlib.suppress(OSError):
            for row in table.read_text().splitlines()[1:]:
                fields = row.split()
                if len(fields) > 9 and fields[3] == _LISTEN and \
                        int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(int(fields[9]))
    return inodes


def _holds(pid: int, sockets: set[str]) -> bool:
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone, or another user's
        return False
    for fd in descriptors:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                return True
    return False


def _socket_names(inodes: Iterable[int]) -> set[str]:
    return {f"socket:[{inode}]" for inode in inodes}


def owners(port: int) -> set[int] | None:
    """The PIDs holding a socket that listens on ``port``: empty when none can be seen (another
    user's process), None without /proc."""
    inodes = listening_inodes(port)
    if inodes is None:
        return None
    sockets = _socket_names(inodes)
    if not sockets:
        return set()
    return {int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and _holds(int(entry), sockets)}


def serves(port: int, pid: int) -> bool | None:
    """Whether process ``pid`` (or a process of its group) listens on ``port``; None when it
    cannot be told (no /proc)."""
    inodes = listening_inodes(port)
    if inodes is None:
        return None
    sockets = _socket_names(inodes)
    if not sockets:
        return False
    if _holds(pid, sockets):
        return True
    return any(_group(owner) == pid for owner in owners(port) or ())


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def command_line(pid: int) -> str:
    """The command line of ``pid``, shortened to one readable line ('?' if unreadable)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    line = " ".join(part.decode(errors="replace") for part in argv if part)
    return line if len(line) <= 120 else line[:117] + "..."


def describe_owner(port: int) -> str:
    """Who holds ``port``: "PID 123 (python -m http.server)", or why that is unknown."""
    found = owners(port)
    if not found:
        return "another process (its PID could not be found)"
    return ", ".join(f"PID {pid} ({command_line(pid)})" for pid in sorted(found))


def taken(ports: Mapping[str, int]) -> list[str]:
    """One line per port of ``ports`` (what will use it → port) that is in use, naming its
    owner; empty when every port is free."""
    return [f"port {port} ({name}) is in use by {describe_owner(port)}"
            for name, port in ports.items() if in_use(port)]
