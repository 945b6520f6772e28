"""``ackloop bench``: a section that fails is its own failure. The others still run, the table
and the JSON hold their figures, the report names the section that failed and why, and the
exit code says a section failed, once everything was written.

The sections here are stand-ins that give back a real run's figures (docs/bench/bench.json)
at once; the cold-question section fails as it did on a machine with no storage emulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from tests.support.stack import CHECKOUT
from typer.testing import CliRunner

from ackloop_dev.bench import cold_query, compare, dbos_side, restate_side, temporal_side
from ackloop_dev.cli.bench import bench

MEASURED = json.loads((CHECKOUT / "docs" / "bench" / "bench.json").read_text())


def _gives(section: str) -> Any:
    async def measure(*args: Any, **kwargs: Any) -> dict[str, Any]:
        figures: dict[str, Any] = MEASURED[section]
        return figures

    return measure


async def _refused(*args: Any, **kwargs: Any) -> dict[str, Any]:
    raise httpx.ConnectError("[Errno 111] Connection refused")


def test_a_failing_section_is_reported_and_the_others_still_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(compare, "measure_ackloop", _gives("ackloop"))
    monkeypatch.setattr(cold_query, "measure_on_own_emulators", _refused)
    monkeypatch.setattr(temporal_side, "measure_temporal", _gives("temporal"))
    for side, measure in ((dbos_side, "measure_dbos"), (restate_side, "measure_restate")):
        monkeypatch.setattr(side, "unavailable", lambda: None)
        monkeypatch.setattr(side, measure, _gives(side.__name__.rsplit(".")[-1][:-5]))
    app = typer.Typer()
    app.command()(bench)
    out = tmp_path / "bench.json"
    ran = CliRunner().invoke(app, ["--json", str(out), "--chart", str(tmp_path / "bench.png"),
                                   "--markdown", str(tmp_path / "bench.md")])

    assert ran.exit_code == 1, ran.output
    written = json.loads(out.read_text())
    assert written["meta"]["failed"] == {
        "cold_query": "ConnectError: [Errno 111] Connection refused"}
    for section in ("ackloop", "temporal", "dbos", "restate"):
        assert written[section] == MEASURED[section]
    assert set(written["meta"]["sections"]) == {"ackloop", "cold_query", "temporal", "dbos",
                                                "restate"}
    assert written["targets"]  # checked on the sections that ran
    table = (tmp_path / "bench.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| figure |"))
    for column in ("ackloop (push delivery)", "Temporal (sqlite)", "DBOS", "Restate"):
        assert column in header
    assert "cold_query: FAILED (ConnectError: [Errno 111] Connection refused)" in table
    assert "[cold query] FAILED: ConnectError" in ran.output
    assert "sections that failed (the others ran): cold_query: " in ran.output
