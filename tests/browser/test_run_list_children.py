"""Child runs in the run list (``#/``), in headless Chromium: a ``research-team`` run's children
(its researcher's and critic's runs) show under it, indented; a child whose parent is not on the
page still shows, marked, with a link to its parent."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.browser.conftest import Inspector
from tests.browser.test_inspector import retype, wait_for, wait_status

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]


def rows(driver: Any) -> list[dict[str, Any]]:
    """The list's rows in order: each run, its depth, its parent, its question's indent."""
    found: list[dict[str, Any]] = driver.execute_script("""
        return [...document.querySelectorAll('#run-list tr[data-run-id]')].map(row => ({
          run: row.dataset.runId, depth: Number(row.dataset.depth),
          parent: row.dataset.parentRunId || null, agent: row.querySelector('.agent').innerText,
          indent: parseFloat(getComputedStyle(row.querySelector('td.text')).paddingLeft),
          parentLink: row.querySelector('a.parent-link')?.getAttribute('href') || null}));""")
    return found


def test_a_research_team_runs_children_show_nested_under_it(
    driver: Any, inspector: Inspector, screenshot: Callable[[str], Path]
) -> None:
    run_id = inspector.start_run("the 1850 census", "research-team", f"team-{uuid.uuid4().hex[:8]}")
    wait_for(driver, lambda _: inspector.run(run_id)["status"] == "completed",
             "the research team's run to complete")
    children = [c["run_id"] for c in inspector.run(run_id)["children"]]
    assert [c["agent"] for c in inspector.run(run_id)["children"]] == ["researcher", "critic"]
    listed = {r["run_id"]: r for r in inspector.api("GET", "/runs").json()["runs"]}
    assert all(listed[c]["parent_run_id"] == run_id for c in children)  # what the page nests by

    driver.get(f"{inspector.url}/ui#/")

    def nested(d: Any) -> list[dict[str, Any]] | None:
        shown = rows(d)
        at = next((i for i, row in enumerate(shown) if row["run"] == run_id), None)
        return shown[at:at + 3] if at is not None and len(shown) >= at + 3 else None

    family = wait_for(driver, lambda d: (found := nested(d))
                      and [row["run"] for row in found[1:]] == children and found,
                      "the two child runs right under their parent")
    parent, *kids = family
    assert (parent["depth"], parent["parent"], parent["agent"]) == (0, None, "research-team")
    for kid, agent in zip(kids, ("researcher", "critic"), strict=True):
        assert (kid["depth"], kid["parent"], kid["agent"]) == (1, run_id, agent)
        assert kid["indent"] > parent["indent"]
        assert kid["parentLink"] is None  # its parent is right above it
    assert sum(row["run"] in children for row in rows(driver)) == 2  # not also at their place
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", driver.find_element(
        By.CSS_SELECTOR, f'#run-list tr[data-run-id="{run_id}"]'))
    screenshot("runs-nested")

    # Filtered to the researcher's runs, the parent is not on the page: the child is marked, and
    # links to it.
    retype(driver.find_element(By.ID, "filter-agent"), "researcher")
    child = wait_for(driver, lambda d: next((row for row in rows(d) if row["run"] == children[0]
                                             and all(r["agent"] == "researcher" for r in rows(d))),
                                            None), "the researcher's run alone")
    assert (child["depth"], child["parent"]) == (0, run_id)
    assert child["parentLink"] == f"#/runs/{run_id}"
    driver.find_element(
        By.CSS_SELECTOR, f'#run-list tr[data-run-id="{children[0]}"] a.parent-link').click()
    wait_for(driver, lambda d: d.current_url.endswith(f"#/runs/{run_id}"), "the parent's page")
    wait_status(driver, "completed", "the parent's run view")
