"""The real MCP server of ``tests.support.mcp_server``, started for a test module over stdio
(a subprocess the toolbox starts) or streamable HTTP (a uvicorn subprocess on a free port)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ackloop.tools.mcp import MCPServer
from ackloop_dev.devstack.emulators import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVER_MODULE = "tests.support.mcp_server"


def server_env(ledger: Path) -> dict[str, str]:
    return {"MCP_TEST_LEDGER": str(ledger), "PYTHONPATH": str(ROOT)}


def stdio_server(ledger: Path) -> MCPServer:
    return MCPServer.stdio(sys.executable, ["-m", SERVER_MODULE, "stdio"],
                           env=server_env(ledger), cwd=str(ROOT), name="orders")


@contextmanager
def http_server(ledger: Path) -> Iterator[str]:
    """Serve the test server over streamable HTTP; yields its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", SERVER_MODULE, "http", str(port)],
        cwd=ROOT, env={**os.environ, **server_env(ledger)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the MCP test server exited: {process.stderr.read()!r}")  # type: ignore[union-attr]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def ledger_entries(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines()]
