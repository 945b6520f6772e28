"""The documentation site in headless Chromium, served over HTTP as any static host serves it:
the tutorial's first page and a reference page show their text, the navigation and the code,
and nothing on them comes from another host. Each page is saved as a screenshot (see
conftest): ``docs-tutorial.png`` and ``docs-reference.png``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import ackloop
from tests.browser.test_inspector import text_of, wait_for
from tests.docs.site import built_site

pytestmark = [pytest.mark.browser]

Screenshot = Callable[[str], Path]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line on stderr per request."""


@pytest.fixture(scope="module")
def docs_url(browser_paths: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[str]:
    """The built site, served on a free port of 127.0.0.1 until the module ends."""
    site = built_site(tmp_path_factory)
    assert site.returncode == 0, site.output
    handler = functools.partial(_Quiet, directory=str(site.directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def open_page(driver: Any, url: str, heading: str) -> None:
    driver.get(url)
    wait_for(driver, lambda d: heading in text_of(d, "article h1"), f"the heading {heading!r}")


def resources_from_elsewhere(driver: Any, origin: str) -> list[str]:
    """What the page loaded from another origin than the site's."""
    names: list[str] = driver.execute_script(
        "return performance.getEntriesByType('resource').map(entry => entry.name)")
    return [name for name in names if not name.startswith(origin)]


def test_the_tutorial_opens_with_its_navigation(driver: Any, docs_url: str,
                                                screenshot: Screenshot) -> None:
    open_page(driver, f"{docs_url}/tutorial/", "Tutorial: an expense desk")
    article = text_of(driver, "article")
    assert "This tutorial builds a small multi-agent app on ackloop" in article
    assert 'pip install -e "$HOME/ackloop[eval]"' in article  # from a checkout: not on PyPI yet
    tabs = text_of(driver, ".md-tabs")
    for tab in ("Home", "Tutorial", "How-to guides", "Concepts", "Reference"):
        assert tab in tabs, tabs
    sidebar = text_of(driver, ".md-sidebar--primary")
    assert "An agent with a tool" in sidebar and "On the local stack" in sidebar
    assert resources_from_elsewhere(driver, docs_url) == []
    screenshot("docs-tutorial")


def test_a_reference_page_shows_the_docstrings(driver: Any, docs_url: str,
                                               screenshot: Screenshot) -> None:
    open_page(driver, f"{docs_url}/reference/ackloop/#ackloop.Agent", "The ackloop package")
    assert ackloop.Agent.__doc__ is not None
    summary = ackloop.Agent.__doc__.strip().splitlines()[0]
    wait_for(driver, lambda d: summary in text_of(d, "article"), "Agent's docstring")
    shown: bool = driver.execute_script(
        "const h = document.getElementById('ackloop.Agent');"
        "const box = h && h.getBoundingClientRect();"
        "return !!box && box.top >= 0 && box.top < window.innerHeight")
    assert shown, "the Agent heading is not in view"
    assert resources_from_elsewhere(driver, docs_url) == []
    screenshot("docs-reference")
