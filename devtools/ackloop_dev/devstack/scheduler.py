"""The local stand-in for Cloud Scheduler's sweep job (``infra/scheduler.tf``).

``python -m ackloop_dev.devstack.scheduler --url http://127.0.0.1:PORT/sweep --every 60
--stats-port N``
POSTs to the API's ``/sweep`` every ``--every`` seconds, as the deployed job does every minute, so
a local run that no message moves is resumed the way a deployed one is. ``GET /_stats`` on
``127.0.0.1:N`` reports the calls made, the last answer and what the sweeps did.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

log = logging.getLogger("ackloop_dev.devstack.scheduler")


class SweepJob:
    def __init__(self, url: str, every_s: float) -> None:
        self.url = url
        self.every_s = every_s
        self.calls = 0
        self.failures = 0
        self.swept: dict[str, int] = {}
        self.last: dict[str, Any] = {}
        self._lock = threading.Lock()

    def tick(self) -> None:
        body: dict[str, Any]
        try:
            response = httpx.post(self.url, timeout=max(30.0, self.every_s))
            body = response.json() if response.is_success else {"error": response.text[:500]}
        except (httpx.HTTPError, ValueError) as exc:
            response, body = None, {"error": f"{type(exc).__name__}: {exc}"}
        with self._lock:
            self.calls += 1
            self.last = {"at": time.time(), "status": response.status_code if response else None,
                         "body": body}
            if response is None or not response.is_success:
                self.failures += 1
                log.warning("sweep call failed: %s", body)
                return
            for item in body.get("swept", []):
                self.swept[item["action"]] = self.swept.get(item["action"], 0) + 1
                log.warning("sweeper: run %s %s (%s)", item["run_id"], item["action"],
                            item["detail"])

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"url": self.url, "every_s": self.every_s, "calls": self.calls,
                    "failures": self.failures, "swept": dict(self.swept), "last": self.last}

    def run_forever(self) -> None:
        while True:
            time.sleep(self.every_s)
            self.tick()


def serve_stats(job: SweepJob, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = (200, job.stats()) if self.path == "/_stats" else (404, {})
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the API's POST /sweep URL")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between calls")
    parser.add_argument("--stats-port", type=int, required=True)
    args = parser.parse_args(argv)
    if args.every <= 0:
        parser.error("--every must be positive")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    job = SweepJob(args.url, args.every)
    serve_stats(job, args.stats_port)
    log.info("sweeping %s every %g s", args.url, args.every)
    job.run_forever()


if __name__ == "__main__":
    main()
