"""Offline stand-ins for api.weather.gov, ip-api and icanhazip, on one local HTTP server.

In-process::

    with SandboxApis() as apis:          # 127.0.0.1, ephemeral port
        settings = apis.settings()

As a process (prints ``sandbox APIs listening on http://127.0.0.1:N``, serves until SIGTERM)::

    python -m ackloop_dev.fakes.sandbox_apis --port 8095

Endpoints: ``GET /alerts/active/area/{AREA}`` (weather.gov GeoJSON; unknown area: 400
problem+json), ``GET /json/{ip}`` (ip-api), ``GET /ip`` (icanhazip: the IP and a newline),
``GET /`` (health), ``GET /_admin/stats`` (counters), ``POST /_admin/faults`` (JSON fault
settings, see :class:`~ackloop_dev.fakes.sandbox_faults.Faults`), ``POST /_admin/reset`` (counters).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ackloop.config.settings import Settings
from ackloop_dev.fakes import sandbox_data
from ackloop_dev.fakes.sandbox_faults import FaultDice, Faults

logger = logging.getLogger(__name__)

_ALERTS_PREFIX = "/alerts/active/area/"


class SandboxApis:
    """The sandbox server. Start it with :meth:`start` or ``with``; stop it with :meth:`stop`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        faults: Faults | None = None,
        echo_ip: str = sandbox_data.ECHO_IP,
    ) -> None:
        self.echo_ip = echo_ip
        self.dice = FaultDice(faults or Faults())
        self._stats_lock = threading.Lock()
        self._stats: Counter[str] = Counter()
        self._closing = threading.Event()
        self._server = _Server((host, port), _Handler)
        self._server.sandbox = self
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:N``: the NWS and ip-api base URL."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def ip_echo_url(self) -> str:
        """The icanhazip stand-in."""
        return f"{self.base_url}/ip"

    def settings_overrides(self) -> dict[str, str]:
        """Keyword arguments for :class:`~ackloop.config.settings.Settings` that point at this
        server."""
        return {
            "nws_base_url": self.base_url,
            "ipapi_base_url": self.base_url,
            "ip_echo_url": self.ip_echo_url,
        }

    def settings(self, base: Settings | None = None) -> Settings:
        """``base`` (default: from the environment) with the three URLs pointing here."""
        return (base or Settings()).model_copy(update=self.settings_overrides())

    def environment(self) -> dict[str, str]:
        """The same as environment variables, for a child process."""
        return {f"ACKLOOP_{key.upper()}": value for key, value in self.settings_overrides().items()}

    def start(self) -> SandboxApis:
        """Serve on a background thread; returns self."""
        if self._thread is None:
            # A short poll interval makes stop() quick (the default waits up to 0.5 s).
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="sandbox-apis",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake delayed requests, release the port."""
        self._closing.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> SandboxApis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stats(self) -> dict[str, int]:
        """Counters: ``requests``, ``requests:<endpoint>``, ``status:<code>``, ``faults:500``,
        ``faults:delay``."""
        with self._stats_lock:
            return dict(self._stats)

    def reset_stats(self) -> None:
        with self._stats_lock:
            self._stats.clear()

    def count(self, *keys: str) -> None:
        with self._stats_lock:
            self._stats.update(keys)

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the server stops."""
        self._closing.wait(seconds)


class _Server(ThreadingHTTPServer):
    # Slow (delayed) handler threads must not keep the process alive at exit.
    daemon_threads = True
    sandbox: SandboxApis


class _Handler(BaseHTTPRequestHandler):
    server_version = "ackloop-sandbox/1"
    protocol_version = "HTTP/1.1"

    server: _Server

    @property
    def sandbox(self) -> SandboxApis:
        return self.server.sandbox

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), dict(parse_qsl(url.query))
        if path == "/":
            self._send(200, {"status": "ok"})
            return
        if path == "/_admin/stats":
            self._send(200, self.sandbox.stats())
            return
        endpoint = _endpoint(path)
        if endpoint is None:
            self._send(404, {"error": f"no route for {path}"})
            return
        self.sandbox.count("requests", f"requests:{endpoint}")
        decision = self.sandbox.dice.roll(path, query)
        if decision.delay_seconds > 0:
            self.sandbox.count("faults:delay")
            self.sandbox.sleep(decision.delay_seconds)
        if decision.fail:
            self.sandbox.count("faults:500")
            self._send_error_500(endpoint)
            return
        if endpoint == "alerts":
            self._alerts(path.removeprefix(_ALERTS_PREFIX).strip("/"))
        elif endpoint == "ipapi":
            query_ip = path.removeprefix("/json").strip("/") or self.sandbox.echo_ip
            self._send(200, sandbox_data.ipapi_lookup(query_ip))
        else:
            self._send(200, f"{self.sandbox.echo_ip}\n", content_type="text/plain")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/_admin/reset":
            self.sandbox.reset_stats()
            self._send(200, {"status": "reset"})
            return
        if path != "/_admin/faults":
            self._send(404, {"error": f"no route for POST {path}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            changes = json.loads(self.rfile.read(length) or b"{}")
            faults = self.sandbox.dice.faults.updated(changes)
        except (ValueError, TypeError) as exc:
            self._send(400, {"error": str(exc)})
            return
        self.sandbox.dice.reconfigure(faults)
        self._send(200, {"faults": faults.__dict__})

    def _alerts(self, area: str) -> None:
        base = self.sandbox.base_url
        if not sandbox_data.is_known_area(area):
            body = sandbox_data.bad_area_problem(area, base)
            self._send(400, body, content_type="application/problem+json")
            return
        collection = sandbox_data.alerts_collection(area, base)
        self._send(200, collection, content_type="application/geo+json")

    def _send_error_500(self, endpoint: str) -> None:
        if endpoint == "alerts":
            problem = {
                "title": "Unexpected Problem",
                "type": "https://api.weather.gov/problems/UnexpectedProblem",
                "status": 500,
                "detail": "An unexpected problem has occurred.",
            }
            self._send(500, problem, content_type="application/problem+json")
        else:
            self._send(500, "Internal Server Error\n", content_type="text/plain")

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body, indent=2).encode()
        self.sandbox.count(f"status:{status}")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _endpoint(path: str) -> str | None:
    if path.startswith(_ALERTS_PREFIX):
        return "alerts"
    if path == "/json" or path.startswith("/json/"):
        return "ipapi"
    if path == "/ip":
        return "ip"
    return None


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT. Faults come from ``ACKLOOP_SANDBOX_*`` and the flags."""
    parser = argparse.ArgumentParser(prog="python -m ackloop_dev.fakes.sandbox_apis")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--error-rate", type=float, help="share of requests answered 500")
    parser.add_argument("--delay-seconds", type=float, help="sleep before answering")
    parser.add_argument("--delay-rate", type=float, help="share of requests delayed")
    parser.add_argument("--seed", type=int, help="seed of the fault dice")
    args = parser.parse_args(argv)
    flags = {
        name: value
        for name, value in vars(args).items()
        if name in ("error_rate", "delay_seconds", "delay_rate", "seed") and value is not None
    }
    faults = Faults.from_env().updated(flags)

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with SandboxApis(args.host, args.port, faults=faults) as apis:
        print(f"sandbox APIs listening on {apis.base_url}", flush=True)
        for name, value in apis.environment().items():
            print(f"{name}={value}", flush=True)
        while not stopping.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
