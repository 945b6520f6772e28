"""checkov's policy checks on infra/ and the Dockerfile: no failures, and every skip says why."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest

from tests.infra.tools import DOCKERFILE_PATH, INFRA, REPO, require_executable

SKIP_COMMENT = re.compile(r"#\s*checkov:skip=(CKV2?_[A-Z0-9_]+)(?::(.*))?")


def run_checkov(*target: str) -> list[dict[str, Any]]:
    checkov = require_executable("checkov", "CHECKOV_BIN")
    result = subprocess.run(
        # --skip-download: never contact the vendor's platform (offline, and nothing to fetch).
        [checkov, *target, "--output", "json", "--quiet", "--compact", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    assert result.stdout.strip(), f"checkov printed nothing:\n{result.stderr[-2000:]}"
    report = json.loads(result.stdout)
    return report if isinstance(report, list) else [report]


def failures(reports: list[dict[str, Any]]) -> list[str]:
    found = []
    for report in reports:
        for check in report.get("results", {}).get("failed_checks", []):
            found.append(f"{check['check_id']} {check['resource']} ({check['file_path']})")
    return found


@pytest.mark.parametrize(
    "target",
    [
        ("-d", str(INFRA), "--framework", "terraform"),
        ("-f", str(DOCKERFILE_PATH), "--framework", "dockerfile"),
    ],
    ids=["terraform", "dockerfile"],
)
def test_checkov_passes(target: tuple[str, ...]) -> None:
    reports = run_checkov(*target)
    passed = sum(r.get("summary", {}).get("passed", 0) for r in reports)
    assert passed > 0, "checkov checked nothing"
    assert not failures(reports), "\n".join(failures(reports))


def test_every_checkov_skip_gives_a_reason() -> None:
    files = [*INFRA.glob("*.tf"), DOCKERFILE_PATH]
    skips = 0
    for path in files:
        for match in SKIP_COMMENT.finditer(path.read_text(encoding="utf-8")):
            skips += 1
            reason = (match.group(2) or "").strip()
            assert len(reason) >= 20, f"{path.name}: skip of {match.group(1)} needs a real reason"
    assert skips, "expected the documented CMEK/HEALTHCHECK skips"
