"""The documentation site builds in strict mode (no warning, no broken link or anchor), holds
its key pages (the tutorial, the reference generated from the docstrings, the HTTP API
generated from the OpenAPI document, the settings), loads nothing from another host, and the
README stays a landing page whose links and code are real."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

import ackloop
from ackloop.config.settings import Settings
from tests.docs.site import ROOT, Site, built_site

README = ROOT / "README.md"
README_MAX_LINES = 250


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    built = built_site(tmp_path_factory)
    assert built.returncode == 0, built.output
    return built


def text(page: str) -> str:
    """A page's visible text, one space between words."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


def test_the_site_builds_strict_without_a_warning(site: Site) -> None:
    assert "WARNING" not in site.output, site.output
    pages = list(site.directory.rglob("index.html"))
    assert len(pages) >= 40, len(pages)
    print(f"site built in {site.seconds:.1f} s: {len(pages)} pages")


def test_the_tutorial_is_there_with_the_examples_code(site: Site) -> None:
    for page in ("tutorial/", "tutorial/first-agent/", "tutorial/team/", "tutorial/files/",
                 "tutorial/testing/", "tutorial/evals/", "tutorial/local-stack/"):
        assert (site.directory / page / "index.html").is_file(), page
    first = text(site.page("tutorial/first-agent/"))
    source = (ROOT / "examples/expense_desk/expense_desk/tools.py").read_text()
    assert "def policy_limit(category: Category)" in source
    assert "def policy_limit(category: Category) -> dict[str, str | float]:" in first
    assert "--8<--" not in first  # the snippets' markers are not shown
    team = text(site.page("tutorial/team/"))
    assert "manager.as_handoff()" in team and "auditor.as_tool(max_steps=4)" in team


def test_the_reference_holds_the_docstrings(site: Site) -> None:
    page = text(site.page("reference/ackloop/"))
    assert ackloop.Agent.__doc__ is not None
    first_line = ackloop.Agent.__doc__.strip().splitlines()[0]
    assert first_line in page
    for name in ("AgentTester", "run_agent", "FunctionModel", "ToolContext", "MCPServer"):
        assert name in page, name
    assert ":class:" not in page  # the docstrings' roles became references or code
    assert "EvalRunner" in text(site.page("reference/evals/"))


def test_the_settings_table_lists_every_setting(site: Site) -> None:
    page = text(site.page("reference/settings/"))
    for name in Settings.model_fields:
        assert f"ACKLOOP_{name.upper()}" in page or name == "project_id", name
    assert "ACKLOOP_PROJECT_ID / GOOGLE_CLOUD_PROJECT" in page


def test_the_http_api_page_and_document_come_from_the_app(site: Site) -> None:
    page = text(site.page("reference/http-api/"))
    assert "POST /runs" in page and "Start a run" in page
    assert "GET /runs/{run_id}/events" in page
    document = json.loads((site.directory / "openapi.json").read_text())
    assert "post" in document["paths"]["/runs"]
    for path, item in document["paths"].items():
        for method in item:
            assert f"{method.upper()} {path}" in page, (method, path)


def test_nothing_is_loaded_from_another_host(site: Site) -> None:
    for path in site.directory.rglob("*.html"):
        page = path.read_text(encoding="utf-8")
        remote = re.findall(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]+",
                            page)
        assert not remote, (path, remote)


def test_the_readme_is_a_landing_page_whose_links_hold(site: Site) -> None:
    readme = README.read_text()
    lines = readme.splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    assert 'make ask Q="are there any weather alerts where I am?"' in readme
    assert re.search(r"^make test\s", readme, re.M)
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert any(t.startswith("docs/") for t in local)
    for target in local:
        assert (ROOT / target).exists(), target
        if target.startswith("docs/") and target.endswith(".md"):
            built = site.directory / Path(target).relative_to("docs").with_suffix("")
            if built.name == "index":
                built = built.parent
            assert (built / "index.html").is_file(), target


def test_the_readme_code_is_the_tutorial_apps(site: Site) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    app = ROOT / "examples" / "expense_desk" / "expense_desk"
    source = (app / "tools.py").read_text() + (app / "first.py").read_text()
    for line in block.splitlines():
        assert line in source.splitlines(), line
