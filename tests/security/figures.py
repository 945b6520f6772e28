"""The security tier's figures: every probe adds what it tried and what it saw here.

One process-wide :data:`FIGURES`; the tier's conftest writes it as JSON at the end of the session
when ``ACKLOOP_SECURITY_FIGURES`` names a file, and :mod:`tests.security.report` prints it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FIGURES_ENV = "ACKLOOP_SECURITY_FIGURES"


@dataclass
class Figures:
    requests: int = 0
    """HTTP API requests tried (fuzz, slow clients, streams)."""
    envelopes: int = 0
    """Push envelopes tried: POSTed to a step function, or published to a topic as poison."""
    server_errors: int = 0
    hangs: int = 0
    """Requests with no answer within their bound (or a connection dropped without one)."""
    leaked_secrets: int = 0
    forged_steps_executed: int = 0
    """Tool calls the sandbox served that no ledger records."""
    rejected_writes: int = 0
    """Documents written by a rejected request or envelope (other than its own poison record)."""
    redelivered: int = 0
    """Poison messages answered non-2xx at least once (so redelivered)."""
    idle_streams: int = 0
    peak_api_rss_mib: float | None = None
    longest_hold_s: float = 0.0
    longest_hold: str = ""
    samples: list[str] = field(default_factory=list)
    """A few examples of what broke an invariant, for the report."""

    def held(self, what: str, seconds: float) -> None:
        if seconds > self.longest_hold_s:
            self.longest_hold_s, self.longest_hold = seconds, what

    def sample(self, text: str) -> None:
        if len(self.samples) < 40:
            self.samples.append(text[:300])

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


FIGURES = Figures()


def dump(path: str | None = None) -> Path | None:
    target = path or os.environ.get(FIGURES_ENV)
    if not target:
        return None
    out = Path(target)
    out.write_text(json.dumps(FIGURES.as_dict(), indent=2))
    return out


def lines(f: Figures) -> list[str]:
    """The figures as the report prints them."""
    rss = f"{f.peak_api_rss_mib:.0f} MiB" if f.peak_api_rss_mib is not None else "not measured"
    out = [
        f"requests tried (HTTP API)              {f.requests}",
        f"envelopes tried (push endpoints/topics) {f.envelopes}",
        f"5xx answers                            {f.server_errors}",
        f"hangs (no answer within the bound)     {f.hangs}",
        f"leaked secrets                         {f.leaked_secrets}",
        f"forged steps executed                  {f.forged_steps_executed}",
        f"documents written by rejected input    {f.rejected_writes}",
        f"poison redelivered                     {f.redelivered}",
        f"peak API RSS with {f.idle_streams} idle streams     {rss}",
        f"longest time a request held a process  {f.longest_hold_s:.1f} s ({f.longest_hold})",
    ]
    out += [f"  ! {s}" for s in f.samples]
    return out
