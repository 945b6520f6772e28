"""The files a question carried, on its run's page in headless Chromium: a thumbnail of an image
and a download link that saves the very bytes sent (``GET /runs/{id}/files/{sha256}`` by the
digest the run's ``files`` names)."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.browser.conftest import WAIT_S, Inspector
from tests.browser.test_inspector import open_run, wait_for, wait_status
from tests.engine.test_tool_files import png

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]


def downloaded(directory: Path, name: str, timeout: float = WAIT_S) -> bytes:
    """The bytes of ``name`` once the browser has saved it into ``directory``."""
    deadline = time.monotonic() + timeout
    path = directory / name
    while time.monotonic() < deadline:
        if path.exists() and not (directory / f"{name}.crdownload").exists():
            return path.read_bytes()
        time.sleep(0.1)
    raise AssertionError(f"{name} not downloaded after {timeout:g} s: {list(directory.iterdir())}")


def test_a_questions_image_shows_on_its_run_page_and_downloads(
    driver: Any, inspector: Inspector, screenshot: Callable[[str], Path], tmp_path: Path
) -> None:
    photo = png(160, 96)
    sha = hashlib.sha256(photo).hexdigest()
    started = inspector.api("POST", "/runs", json={
        "text": "what is in this picture?", "agent": "echo",
        "files": [{"inline_data": {"mime_type": "image/png", "display_name": "photo.png",
                                   "data": base64.b64encode(photo).decode()}}]})
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    open_run(driver, inspector, run_id)
    wait_status(driver, "completed", "the run to complete")
    loaded = wait_for(driver, lambda d: d.execute_script("""
        const img = document.querySelector('#question-files img.thumbnail');
        return img && img.complete && img.naturalWidth > 0
          ? {width: img.naturalWidth, height: img.naturalHeight, alt: img.alt} : null;"""),
        "the question's image as a thumbnail")
    assert (loaded["width"], loaded["height"]) == (160, 96)
    assert loaded["alt"] == f"photo.png (image/png, {len(photo)} bytes)"
    link = driver.find_element(By.CSS_SELECTOR, "#question-files a.file-download")
    assert link.get_attribute("data-sha256") == sha
    assert link.get_attribute("download") == "photo.png"

    # What the link reads: the API's answer for the digest the run names.
    served = inspector.api("GET", f"/runs/{run_id}/files/{sha}")
    assert served.status_code == 200, served.text
    assert served.content == photo and served.headers["content-type"] == "image/png"

    # Followed in the browser, the link saves the same bytes under the file's name.
    saved = tmp_path / "downloads"
    saved.mkdir()
    driver.execute_cdp_cmd("Page.setDownloadBehavior",
                           {"behavior": "allow", "downloadPath": str(saved)})
    link.click()
    assert downloaded(saved, "photo.png") == photo
    driver.execute_script("document.getElementById('question-files')"
                          ".scrollIntoView({block: 'center'})")
    screenshot("run-files")
