"""A decision on its way: the page reads the run again (its timer, the run's events) while the
approval's POST is answered, and those reads no longer list the call as waiting. The panel the
person decided in stays and shows what the API recorded."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.browser.conftest import Inspector
from tests.browser.test_inspector import (
    approval_panel,
    open_run,
    text_of,
    wait_for,
    wait_status,
)

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]

# The page's fetch, wrapped: the answer to the approval's POST reaches the page only after a
# read of the run the page sent once the API had recorded the decision has been answered.
HOLD_THE_DECISIONS_ANSWER = """
    const [real, run] = [window.fetch, `/runs/${arguments[0]}`];
    window.readsAfterDecision = null;
    window.fetch = async (url, options) => {
      const counted = String(url) === run && window.readsAfterDecision !== null;
      const response = await real(url, options);
      if (counted) {
        await response.clone().json();
        window.readsAfterDecision += 1;
      }
      if (String(url).startsWith(`${run}/approvals/`) && options && options.method === "POST") {
        window.readsAfterDecision = 0;
        while (window.readsAfterDecision < 1) await new Promise((r) => setTimeout(r, 50));
        await new Promise((r) => setTimeout(r, 100));  // the page has drawn that read
      }
      return response;
    };"""


def test_reads_of_the_run_before_the_decisions_answer_keep_its_panel(
    driver: Any, inspector: Inspector
) -> None:
    run_id = inspector.start_run("pay 12 to Lin", "approval-demo")
    open_run(driver, inspector, run_id)
    panel = approval_panel(driver, "0000-tool-000")
    driver.execute_script(HOLD_THE_DECISIONS_ANSWER, run_id)
    panel.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_for(driver, lambda d: d.execute_script("return window.readsAfterDecision || 0") >= 1,
             "a read of the run after the API recorded the approval")
    wait_for(driver, lambda _: "Approved by anonymous" in text_of(
        driver, '#approvals div.approval[data-step="0000-tool-000"] .outcome'),
        "the recorded approval in the panel the person approved in")
    wait_status(driver, "completed", "the approved run to complete")
    assert text_of(driver, "#approvals-title") == "Decided"
