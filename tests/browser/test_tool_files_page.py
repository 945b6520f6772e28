"""The run inspector shows a thumbnail of an image a tool returned (the browser loads it from
``GET /runs/{id}/files/{sha256}``), in headless Chromium.

The engine runs in-process here (memory store, memory file store) and the API is served over
real HTTP by uvicorn on 127.0.0.1 from the same event loop, so the file the tool step stored
is the one the API serves."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop_dev.devstack.emulators import free_port
from tests.browser.conftest import WAIT_S
from tests.browser.test_inspector import wait_for
from tests.engine.test_tool_files import loop_of, script

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def served_run() -> Iterator[tuple[str, str]]:
    """(the API's URL, a completed run whose tool returned a PNG)."""
    port = free_port()
    ready = threading.Event()
    failed: list[BaseException] = []
    server: list[uvicorn.Server] = []

    async def main() -> None:
        loop = loop_of(ScriptedModel(script))
        await loop.submit(QueryMessage(request_id="thumbnail", text="draw q3"))
        await loop.run_until_idle()

        async def engine() -> Deps:
            return loop.deps

        server.append(uvicorn.Server(uvicorn.Config(
            create_app(Settings(), deps=engine), host="127.0.0.1", port=port,
            log_level="error")))
        task = asyncio.create_task(server[0].serve())
        while not server[0].started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
            await asyncio.sleep(0.02)
        ready.set()
        await task

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by the fixture
            failed.append(exc)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(60) and not failed, failed
    try:
        yield f"http://127.0.0.1:{port}", run_id_for_request("thumbnail")
    finally:
        if server:
            server[0].should_exit = True
        thread.join(10)


def test_an_image_a_tool_returned_shows_as_a_loaded_thumbnail(
        served_run: tuple[str, str], driver: Any, screenshot: Callable[[str], Path]) -> None:
    url, run_id = served_run
    driver.get(f"{url}/ui#/runs/{run_id}")
    loaded = wait_for(driver, lambda d: d.execute_script("""
        const img = document.querySelector('#transcript img.thumbnail');
        return img && img.complete && img.naturalWidth > 0
            ? {width: img.naturalWidth, height: img.naturalHeight, alt: img.alt,
               src: img.src} : null;"""), "the tool's image to load as a thumbnail", WAIT_S)
    assert loaded["width"] == 64 and loaded["height"] == 32
    assert loaded["alt"].startswith("chart.png (image/png,")
    assert loaded["src"].startswith("blob:")
    driver.execute_script("document.querySelector('#transcript img.thumbnail')"
                          ".scrollIntoView({block: 'center'})")
    screenshot("tool-image-thumbnail")
