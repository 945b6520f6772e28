"""Slow clients on every service: headers then a body trickled a byte at a time, and headers
themselves trickled. A process may not be held past a bound by a client that sends nothing
useful: the connection must be answered or closed within the shortest request timeout a push
service has (what Cloud Run would cut it at)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ackloop.bus.delivery import load_policy
from tests.security.figures import FIGURES
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.timeout(180)]

SERVICES = ("api", "ingest", "model_step", "tool_step", "dead_letter")
BOUND_S = min(load_policy().request_timeout_s.values())
"""Longest a trickling client may hold a connection open."""
GIVE_UP_S = BOUND_S + 15
TRICKLE_EVERY_S = 1.0


async def trickle(port: int, head: bytes, body: bytes) -> tuple[float, bytes]:
    """Send ``head`` whole and ``body`` a byte per second (or, with an empty body, ``head`` a
    byte per second); returns how long the server kept the connection and what it said."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    began = time.monotonic()
    slow = body or head
    if body:
        writer.write(head)
    said = b""
    try:
        for i in range(len(slow)):
            if time.monotonic() - began > GIVE_UP_S:
                break
            writer.write(slow[i:i + 1])
            await writer.drain()
            try:
                chunk = await asyncio.wait_for(reader.read(4096), TRICKLE_EVERY_S)
            except TimeoutError:
                continue
            said = chunk
            break  # answered, or closed (b"")
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
    return time.monotonic() - began, said


def test_trickling_clients_are_cut_off(security_stack: RunningStack) -> None:
    stack = security_stack

    async def all_probes() -> list[tuple[str, float, bytes]]:
        probes = []
        for name in SERVICES:
            port = stack.state.ports[name]
            path = "/runs" if name == "api" else "/"
            head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                    f"\r\nContent-Length: 100000\r\n\r\n").encode()
            probes.append((f"{name} trickled body", trickle(port, head, b"{" * 100_000)))
            probes.append((f"{name} trickled headers", trickle(
                port, head.replace(b"\r\n\r\n", b"\r\nX-Pad: " + b"a" * 200), b"")))
        gathered = asyncio.gather(*(p for _, p in probes))
        # Meanwhile, other callers are served.
        await asyncio.sleep(2)
        reader, writer = await asyncio.open_connection("127.0.0.1", stack.state.ports["api"])
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        served.append(await asyncio.wait_for(reader.read(), 10))
        writer.close()
        results = await gathered
        return [(label, seconds, said) for (label, _), (seconds, said) in zip(probes, results,
                                                                              strict=True)]

    served: list[bytes] = []

    problems = []
    outcomes = asyncio.run(all_probes())
    for label, seconds, said in outcomes:
        FIGURES.requests += 1
        FIGURES.held(label, seconds)
        if seconds > BOUND_S:
            FIGURES.hangs += 1
            FIGURES.sample(f"{label}: held {seconds:.0f} s (bound {BOUND_S:g} s)")
            problems.append(f"{label}: connection held {seconds:.0f} s (bound {BOUND_S:g} s); "
                            f"server said {said[:80]!r}")
        elif said.startswith(b"HTTP/1.1 5"):
            FIGURES.server_errors += 1
            problems.append(f"{label}: {said[:80]!r}")
    assert not problems, "\n".join(problems)
    assert served and served[0].startswith(b"HTTP/1.1 200"), served
    # The api answers a body that never arrives with a 408 that says why, and closes on
    # headers that never end.
    answers = {label: said for label, _, said in outcomes}
    assert answers["api trickled body"].startswith(b"HTTP/1.1 408"), answers["api trickled body"]
    assert answers["api trickled headers"] == b"", answers["api trickled headers"]
