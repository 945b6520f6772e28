"""Peak memory of the api and model_step processes under concurrent maximum-size queries.

Starts the local stack's api and model_step processes (real ``ackloop run`` processes on the
emulators, the model served by the fake Gemini server) on loopback, sends ``--queries``
concurrent ``POST /runs`` each carrying ``--files`` inline files of ``--file-mib`` MiB (the
deployed maximum: 2 x 7 MiB), waits for every run to end, and prints each process's peak
resident set (``VmHWM``) against the memory its Cloud Run service is deployed with
(``infra/run.tf``)::

    python -m ackloop_dev.bench.query_files_memory [--queries 6] [--files 2] [--file-mib 7]

A figure over its limit is what gets an instance killed; the exit status is 1 then.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from ackloop.domain.records import RunStatus
from ackloop_dev.bench.procstats import peak_rss_bytes
from ackloop_dev.devstack import emulators
from ackloop_dev.devstack.stack import LocalStack, StackOptions, project_root

MIB = 1024 * 1024
SERVICES = ("api", "model_step")


def deployed(service: str, run_tf: Path | None = None) -> tuple[int, int]:
    """``(memory in bytes, concurrency)`` of ``service`` in ``infra/run.tf``."""
    text = (run_tf or project_root() / "infra" / "run.tf").read_text()
    block = re.search(rf"\n\s+{service}\s*=\s*\{{(.*?)\n\s+\}}", text, re.S)
    if block is None:
        raise ValueError(f"no service {service!r} in infra/run.tf")
    memory = re.search(r'memory\s*=\s*"(\d+)(Mi|Gi)"', block.group(1))
    concurrency = re.search(r"concurrency\s*=\s*(\d+)", block.group(1))
    if memory is None or concurrency is None:
        raise ValueError(f"service {service!r}: no memory or concurrency in infra/run.tf")
    unit = MIB if memory.group(2) == "Mi" else 1024 * MIB
    return int(memory.group(1)) * unit, int(concurrency.group(1))


def query(index: int, files: int, file_bytes: int) -> dict[str, Any]:
    """A query whose files are distinct random bytes (no two queries share a stored object)."""
    parts = [{"inline_data": {"mime_type": "audio/wav", "display_name": f"q{index}-{n}.wav",
                              "data": base64.b64encode(os.urandom(file_bytes)).decode()}}
             for n in range(files)]
    return {"text": f"query {index}: what is in the files?", "files": parts}


async def send_all(api: str, bodies: list[dict[str, Any]], timeout: float
                   ) -> list[tuple[int, str, float, int]]:
    """POST every body at once, each sent again after a 503's Retry-After (as a client
    should); each answer's status, run id (or error), seconds taken and 503s met."""
    async with httpx.AsyncClient(base_url=api, timeout=timeout) as client:
        async def one(index: int, body: dict[str, Any]) -> tuple[int, str, float, int]:
            began, busy = time.monotonic(), 0
            while True:
                answer = await client.post("/runs", json=body,
                                           headers={"Idempotency-Key": f"files-{index}"})
                if answer.status_code != 503 or busy >= 20:
                    break
                busy += 1
                await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
            data = answer.json()
            return (answer.status_code, str(data.get("run_id") or data.get("code")),
                    time.monotonic() - began, busy)

        return list(await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies))))


async def wait_runs(api: str, run_ids: list[str], timeout: float) -> dict[str, str]:
    """Each run's status once it has ended (or as it is at ``timeout``)."""
    deadline = time.monotonic() + timeout
    status: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=api, timeout=30.0) as client:
        while time.monotonic() < deadline:
            for run_id in run_ids:
                if not RunStatus(status.get(run_id, "queued")).terminal:
                    status[run_id] = (await client.get(f"/runs/{run_id}")).json()["status"]
            if all(RunStatus(s).terminal for s in status.values()):
                break
            await asyncio.sleep(0.5)
    return status


def report(stack: LocalStack, before: dict[str, int]) -> bool:
    """Print each process's peak against its deployed limit; whether all are within."""
    within = True
    for name in SERVICES:
        pid = stack.processes[name].pid
        assert pid is not None
        peak = peak_rss_bytes(pid)
        limit, concurrency = deployed(name)
        ok = peak < limit
        within &= ok
        print(f"{name:<11} peak RSS {peak / MIB:6.0f} MiB (idle {before[name] / MIB:4.0f} MiB)"
              f" / deployed {limit / MIB:5.0f} MiB, concurrency {concurrency:>3}: "
              f"{'within' if ok else 'OVER'}")
    return within


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=6)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--file-mib", type=float, default=7.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    file_bytes = int(args.file_mib * MIB)
    directory = Path(tempfile.mkdtemp(prefix="ackloop-files-memory-"))
    stack = LocalStack(StackOptions(
        directory=directory, pubsub_port=emulators.free_port(),
        firestore_port=emulators.free_port(), base_port=0, sandbox_apis=False,
        fake_gemini=True, sweep_every_s=None, services=SERVICES))
    try:
        state = stack.up(log=lambda line: None)
        api = f"http://127.0.0.1:{state.ports['api']}"
        before = {n: peak_rss_bytes(stack.processes[n].pid or 0) for n in SERVICES}
        bodies = [query(i, args.files, file_bytes) for i in range(args.queries)]
        print(f"{args.queries} concurrent queries of {args.files} x {args.file_mib:g} MiB "
              f"inline (files bucket: {state.files_bucket or 'none: memory'})")
        answers = asyncio.run(send_all(api, bodies, args.timeout))
        del bodies
        for status, what, took, busy in answers:
            print(f"  POST /runs -> {status} {what} in {took:.1f} s ({busy} x 503 first)")
        run_ids = [what for status, what, _, _ in answers if status == 202]
        ended = asyncio.run(wait_runs(api, run_ids, args.timeout))
        print(f"  runs: {sorted(ended.values())}")
        return 0 if report(stack, before) else 1
    finally:
        stack.down()


if __name__ == "__main__":
    sys.exit(main())
