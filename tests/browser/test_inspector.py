"""The run inspector (``/ui``) in headless Chromium against a stack of real processes: the run
list and its filters, a live timeline, a failed run's cause, redriving a real dead letter, and
bearer auth. Each state is saved as a screenshot (see conftest)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.agents import STORY, SURVEYS
from tests.browser.conftest import BEARER_TOKEN, WAIT_S, Inspector

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]

Screenshot = Callable[[str], Path]


def wait_for(driver: Any, condition: Callable[[Any], Any], what: str,
             timeout: float = WAIT_S) -> Any:
    """Poll ``condition(driver)`` until it is truthy; fail naming ``what`` otherwise."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        condition, message=f"waited {timeout:g} s for {what}")


def listed(driver: Any) -> list[str]:
    """The run ids ``#run-list`` shows, read in one go (the list re-renders as it refreshes)."""
    ids: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#run-list tr[data-run-id]')]"
        ".map(row => row.dataset.runId)")
    return ids


def run_state(driver: Any) -> dict[str, Any] | None:
    """``section#run``'s status and the timeline's bars, read in one go."""
    state: dict[str, Any] | None = driver.execute_script("""
        const run = document.querySelector('section#run');
        if (!run) return null;
        const bars = [...document.querySelectorAll('#timeline .bar')];
        return {status: run.dataset.status, steps: bars.map(bar => bar.dataset.step)};""")
    return state


def text_of(driver: Any, selector: str) -> str:
    """The text of the first element ``selector`` finds, read in one go in the page (a view
    re-renders as it refreshes: an element found first and read after may be gone)."""
    text: str = driver.execute_script(
        "const found = document.querySelector(arguments[0]);"
        "return found ? found.innerText.trim() : ''", selector)
    return text


def retype(field: Any, value: str) -> None:
    """Replace an input's text as a user does, then leave it (input and change events)."""
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.BACKSPACE)
    field.send_keys(value, Keys.TAB)


def choose(driver: Any, select_id: str, value: str) -> None:
    """Pick an option of a select from the keyboard (Home, then arrow down to it), as a user
    tabbing through does."""
    field = driver.find_element(By.ID, select_id)
    values = [o.get_attribute("value") for o in Select(field).options]
    field.send_keys(Keys.HOME, *[Keys.ARROW_DOWN] * values.index(value))
    wait_for(driver, lambda d: Select(d.find_element(By.ID, select_id))
             .first_selected_option.get_attribute("value") == value, f"{select_id}={value}")


def open_run(driver: Any, inspector: Inspector, run_id: str) -> None:
    driver.get(f"{inspector.url}/ui#/runs/{run_id}")


def on_phone(driver: Any) -> None:
    """Show the page as a phone does: 390 CSS pixels wide, touch, twice the pixel density."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    driver.refresh()


def assert_fits(driver: Any) -> None:
    """Nothing on the page is wider than the screen (no sideways scrolling to read it)."""
    page, screen = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert page <= screen, f"the page is {page} px wide on a {screen} px screen"


def wait_status(driver: Any, status: str, what: str) -> dict[str, Any]:
    state: dict[str, Any] = wait_for(
        driver, lambda d: (s := run_state(d)) and s["status"] == status and s, what)
    return state


def test_runs_appear_in_the_list_and_filters_narrow_it(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    tag = uuid.uuid4().hex[:8]
    echo_run = inspector.start_run("hello", "echo", f"greet-{tag}")
    survey_run = inspector.start_run("survey the sites", "surveyor", f"survey-{tag}")
    driver.get(f"{inspector.url}/ui#/")
    wait_for(driver, lambda d: {echo_run, survey_run} <= set(listed(d)),
             "both runs in #run-list")
    row = driver.find_element(By.CSS_SELECTOR, f'#run-list tr[data-run-id="{echo_run}"]')
    assert row.find_element(By.CSS_SELECTOR, ".agent").text == "echo"
    assert "hello" in row.find_element(By.CSS_SELECTOR, ".text").text
    screenshot("run-list")

    retype(driver.find_element(By.ID, "filter-agent"), "echo")
    wait_for(driver, lambda d: echo_run in listed(d) and survey_run not in listed(d),
             "the agent filter to keep only the echo run")
    retype(driver.find_element(By.ID, "filter-agent"), "")
    retype(driver.find_element(By.ID, "filter-conversation"), f"survey-{tag}")
    wait_for(driver, lambda d: listed(d) == [survey_run],
             "the conversation filter to keep only the surveyor run")
    retype(driver.find_element(By.ID, "filter-conversation"), "")

    wait_for(driver, lambda _: all(inspector.run(r)["status"] == "completed"
                                   for r in (echo_run, survey_run)), "both runs to complete")
    choose(driver, "filter-status", "failed")
    wait_for(driver, lambda d: not {echo_run, survey_run} & set(listed(d)),
             "status=failed to hide both completed runs")
    choose(driver, "filter-status", "completed")
    wait_for(driver, lambda d: {echo_run, survey_run} <= set(listed(d)),
             "status=completed to show both runs")

    # Keyboard: a row's link keeps the focus while the list refreshes (rows that did not change
    # are left in place), and Enter on it opens the run.
    link = f'#run-list tr[data-run-id="{echo_run}"] a.run-link'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, link), "the echo run's link")
    focused = driver.find_element(By.CSS_SELECTOR, link)
    driver.execute_script("""
        window.listLoads = 0;
        const load = window.fetch;
        window.fetch = async (...args) => {
          const answer = await load(...args);
          if (String(args[0]).startsWith('/runs?')) window.listLoads += 1;
          return answer;
        };
        arguments[0].focus();""", focused)
    # The second load starts only once the first one's rows are in the page.
    wait_for(driver, lambda d: d.execute_script("return window.listLoads") >= 2,
             "two refreshes of the run list")
    assert driver.execute_script(
        "return document.activeElement.closest('tr')?.dataset.runId") == echo_run
    focused.send_keys(Keys.ENTER)
    wait_for(driver, lambda d: d.current_url.endswith(f"#/runs/{echo_run}"),
             "Enter on a.run-link to open the run")
    wait_status(driver, "completed", "the echo run's view")

    on_phone(driver)
    driver.get(f"{inspector.url}/ui#/")
    wait_for(driver, lambda d: echo_run in listed(d), "the run list on a phone")
    screenshot("phone-run-list")
    assert_fits(driver)


def test_a_live_run_grows_its_timeline_until_it_completes(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    run_id = inspector.start_run("survey the sites", "surveyor")
    open_run(driver, inspector, run_id)
    first = wait_for(driver, lambda d: (s := run_state(d)) and s["steps"] and s,
                     "the first bar of the timeline")
    assert first["status"] in ("queued", "running"), first
    seen = len(first["steps"])
    grown = wait_for(
        driver, lambda d: (s := run_state(d)) and len(s["steps"]) > seen
        and s["status"] == "running" and s,
        f"the timeline to grow past {seen} bar(s) while the run is live")
    assert driver.find_element(By.ID, "cancel").is_enabled()
    driver.execute_script("document.getElementById('timeline').scrollIntoView()")
    screenshot("live-timeline")

    done = wait_status(driver, "completed", "the run to complete")
    view = inspector.run(run_id)
    keys = [step["key"] for step in view["steps"]]
    assert len(keys) == 2 * SURVEYS + 1 and len(grown["steps"]) < len(keys)
    wait_for(driver, lambda d: run_state(d)["steps"] == keys,
             f"one bar per step, in order: {keys}")
    assert view["answer"] == "Surveyed site-1, site-2, site-3: all dry."
    wait_for(driver, lambda d: view["answer"] in text_of(d, "#answer"), "the answer")
    assert "completed" in text_of(driver, "#run-status"), done
    assert "answered" in text_of(driver, "#run-status")
    wait_for(driver, lambda d: "$" in text_of(d, "#cost"), "the run's cost in dollars")
    transcript = text_of(driver, "#transcript")
    for seen_text in ("survey the sites", "survey_site", "site-2", "site-3 is dry",
                      view["answer"]):
        assert seen_text in transcript, (seen_text, transcript)
    assert not driver.find_element(By.ID, "cancel").is_enabled()
    screenshot("completed-run")

    on_phone(driver)
    wait_status(driver, "completed", "the run view on a phone")
    screenshot("phone-run")
    assert_fits(driver)


def test_a_failed_run_shows_its_cause(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    run_id = inspector.start_run("survey the archive", "fragile")
    open_run(driver, inspector, run_id)
    wait_status(driver, "failed", "the run to fail")
    view = inspector.run(run_id)
    assert view["status"] == "failed" and "gave dict" in (view["error"] or ""), view
    wait_for(driver, lambda d: "gave dict" in text_of(d, "#run-error"),
             "the failure's cause in #run-error")
    screenshot("failed-run")


def test_a_dead_letter_is_redriven_from_the_page_and_its_run_completes(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    """A model that keeps asking for more time than a request may wait uses up the step's five
    deliveries: Pub/Sub dead-letters it, and the run fails. Once the model answers again, the
    page's redrive button re-publishes the step and the run completes."""
    stack = inspector.stack
    stack.schedule_model_faults("429:30*40")
    try:
        run_id = inspector.start_run("hello again", "echo")
        wait_for(driver, lambda _: inspector.run(run_id)["status"] == "failed",
                 "the run to be dead-lettered", timeout=180)
    finally:
        httpx.post(f"{stack.fake_gemini}/_admin/reset", timeout=5).raise_for_status()
    failed = inspector.run(run_id)
    assert (failed["error"] or "").startswith("dead_lettered")
    attempts = failed["steps"][0]["attempts"]
    assert attempts > 1, failed["steps"]

    # The failed run's timeline marks the step's repeated attempts.
    open_run(driver, inspector, run_id)
    wait_status(driver, "failed", "the dead-lettered run's view")
    bar = '#timeline .bar[data-step="0000-model"]'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"{bar} .retry"),
             "a retry marker on the step's bar")
    marked = driver.find_element(By.CSS_SELECTOR, bar)
    assert marked.get_attribute("data-attempts") == str(attempts)
    assert f"{attempts} attempts" in (marked.get_attribute("aria-label") or "")
    driver.execute_script("document.getElementById('timeline').scrollIntoView()")
    screenshot("dead-lettered-run")
    (letter,) = [d for d in asyncio.run(stack.store().letters.list_dead_letters())
                 if d.data["run_id"] == run_id]
    row = f'#dead-letters tr[data-message-id="{letter.data["message_id"]}"]'

    driver.get(f"{inspector.url}/ui#/dead-letters")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the dead letter's row")
    assert driver.find_elements(By.CSS_SELECTOR, "table#poison")
    screenshot("dead-letters-before-redrive")
    driver.find_element(By.CSS_SELECTOR, f"{row} button.redrive").click()
    wait_for(driver, lambda d: "redriven" in text_of(d, f"{row} .outcome"),
             "the row's outcome: redriven")
    screenshot("dead-letters-after-redrive")

    open_run(driver, inspector, run_id)
    wait_status(driver, "completed", "the redriven run to complete")
    wait_for(driver, lambda d: "Hello from the echo desk." in text_of(d, "#answer"),
             "the redriven run's answer")


def test_bearer_auth_without_the_token_says_401_and_with_it_works(
    driver: Any, bearer_inspector: Inspector, screenshot: Screenshot
) -> None:
    run_id = bearer_inspector.start_run("hello with a token", "echo")
    assert httpx.get(f"{bearer_inspector.url}/runs", timeout=10).status_code == 401

    driver.get(f"{bearer_inspector.url}/ui#/")
    wait_for(driver, lambda d: "token" in text_of(d, "#notice"), "the notice: a token is needed")
    assert driver.find_element(By.ID, "notice").get_attribute("role") == "alert"
    screenshot("bearer-401")

    driver.find_element(By.ID, "token").send_keys(BEARER_TOKEN, Keys.ENTER)
    wait_for(driver, lambda d: run_id in listed(d), "the run, listed with the token")
    wait_for(driver, lambda d: not text_of(d, "#notice"), "the notice to go")
    screenshot("bearer-with-token")


def approval_panel(driver: Any, step: str, within: str = "#approvals") -> Any:
    """The decision panel of ``step`` in ``within`` (a run page's panels, or a chat turn's)."""
    selector = f'{within} div.approval[data-step="{step}"]'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, selector),
             f"the decision panel of {step} in {within}")
    return driver.find_element(By.CSS_SELECTOR, selector)


def test_a_waiting_payment_is_approved_from_the_page_with_edited_args(
    driver: Any, bearer_inspector: Inspector, screenshot: Screenshot
) -> None:
    """With bearer auth: the panel shows the waiting call, a bad edit is the API's 422 in the
    panel, and a good one, typed and sent from the keyboard, is what the tool runs with."""
    run_id = bearer_inspector.start_run("pay 40 to Ada", "approval-demo")
    driver.get(f"{bearer_inspector.url}/ui#/runs/{run_id}")
    driver.find_element(By.ID, "token").send_keys(BEARER_TOKEN, Keys.ENTER)
    panel = approval_panel(driver, "0000-tool-000")
    assert "send_payment" in panel.find_element(By.CSS_SELECTOR, "h3").text
    assert "Undecided by" in panel.text  # the deadline
    assert "waiting for a decision" in text_of(driver, "#run-status")
    args = panel.find_element(By.CSS_SELECTOR, "textarea.args")
    assert json.loads(args.get_attribute("value")) == {"to": "Ada", "amount": 40}
    outcome = panel.find_element(By.CSS_SELECTOR, ".outcome")
    assert outcome.get_attribute("role") == "status"
    for field in ("args", "comment"):  # each field is labelled
        labels = driver.find_elements(
            By.CSS_SELECTOR, f'label[for="approval-0000-tool-000-{field}"]')
        assert labels and labels[0].text, field
    driver.execute_script("document.getElementById('approvals').scrollIntoView()")
    screenshot("approval-waiting")

    def send(new_args: str) -> None:
        """Retype the arguments, then Tab to the comment, Tab to approve, Enter."""
        args.send_keys(Keys.CONTROL, "a")
        args.send_keys(Keys.BACKSPACE, new_args, Keys.TAB)
        driver.switch_to.active_element.send_keys(Keys.TAB)
        focused = driver.switch_to.active_element
        assert focused.get_attribute("class") == "approve", focused.get_attribute("outerHTML")
        focused.send_keys(Keys.ENTER)

    send('{"to": "Ada", "amount": "lots"}')
    wait_for(driver, lambda _: "args do not fit send_payment" in outcome.text,
             "the API's 422 in the panel")
    assert "error" in (outcome.get_attribute("class") or "")
    assert inspector_step(bearer_inspector, run_id, "0000-tool-000")["status"] == "waiting"
    driver.execute_script("document.getElementById('approvals').scrollIntoView()")
    screenshot("approval-invalid-args")

    send('{"to": "Ada", "amount": 30}')
    wait_for(driver, lambda _: "Approved by bearer with edited arguments" in outcome.text,
             "the recorded approval in the panel")
    driver.execute_script("document.getElementById('approvals').scrollIntoView()")
    screenshot("approval-approved")
    wait_status(driver, "completed", "the approved run to complete")
    wait_for(driver, lambda d: '"amount": 30' in text_of(d, "#answer"),
             "the answer: the payment with the edited args")
    assert '"status": "sent"' in text_of(driver, "#answer")
    wait_for(driver, lambda d: text_of(d, "#approvals-title") == "Decided", "the title: Decided")
    (step,) = asyncio.run(bearer_inspector.stack.store().steps.get_steps(run_id, ["0000-tool-000"]))
    assert step is not None and step.decision is not None
    assert (step.decision.decision, step.decision.by, step.decision.args) == (
        "approve", "bearer", {"to": "Ada", "amount": 30})
    assert not text_of(driver, "#approvals div.approval:not([data-decided])")


def inspector_step(inspector: Inspector, run_id: str, key: str) -> dict[str, Any]:
    step: dict[str, Any] = next(s for s in inspector.run(run_id)["steps"] if s["key"] == key)
    return step


def test_a_waiting_payment_is_rejected_with_a_comment_on_a_phone(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    """Two parallel calls, one waiting: its panel fits a phone, the rejection's comment reaches
    the model, and the run answers with both results."""
    run_id = inspector.start_run("pay 500 to Mallory and show the balance", "approval-demo")
    open_run(driver, inspector, run_id)
    on_phone(driver)
    panel = approval_panel(driver, "0000-tool-000")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#approvals div.approval")) == 1
    driver.execute_script("document.getElementById('approvals').scrollIntoView()")
    screenshot("phone-approval")
    assert_fits(driver)
    panel.find_element(By.CSS_SELECTOR, "textarea.comment").send_keys(
        "Mallory is not on the list")
    panel.find_element(By.CSS_SELECTOR, "button.reject").click()
    outcome = panel.find_element(By.CSS_SELECTOR, ".outcome")
    wait_for(driver, lambda _: "Rejected by anonymous" in outcome.text,
             "the recorded rejection in the panel")
    wait_status(driver, "completed", "the run to complete after the rejection")
    rejected = "not run: rejected by anonymous (Mallory is not on the list)"
    wait_for(driver, lambda d: rejected in text_of(d, "#answer"), "the rejection in the answer")
    assert '"balance": 1000' in text_of(driver, "#answer")
    again = inspector.api("POST", f"/runs/{run_id}/approvals/0000-tool-000",
                          json={"decision": "approve"})
    assert again.status_code == 409, again.text


def live_snapshots(driver: Any) -> list[dict[str, str]]:
    """What ``#live-text`` showed at each change since :func:`record_live_text`."""
    seen: list[dict[str, str]] = driver.execute_script("return window.liveSeen || []")
    return seen


def record_live_text(driver: Any) -> None:
    """Keep every state of ``#live-text`` (its attempt and text) in ``window.liveSeen``."""
    wait_for(driver, lambda d: d.find_elements(By.ID, "live-text"), "#live-text")
    driver.execute_script("""
        const box = document.getElementById('live-text');
        window.liveSeen = [];
        new MutationObserver(() => window.liveSeen.push(
            {attempt: box.dataset.attempt, text: box.textContent}))
          .observe(box, {childList: true, characterData: true, subtree: true});""")


def test_live_text_shows_before_the_step_commits_and_gives_way_to_the_transcript(
    driver: Any, inspector: Inspector, screenshot: Screenshot, slow_stream: None
) -> None:
    run_id = inspector.start_run("tell me about the harbour", "narrator")
    open_run(driver, inspector, run_id)
    record_live_text(driver)
    assert driver.find_element(By.ID, "live-text").get_attribute("aria-live") == "polite"
    wait_for(driver, lambda d: text_of(d, "#live-text"), "live text")
    shown = text_of(driver, "#live-text")
    step = inspector_step(inspector, run_id, "0000-model")
    assert step["status"] == "running", step  # shown before the step committed
    assert STORY.startswith(shown) and len(shown) < len(STORY), shown
    assert STORY not in text_of(driver, "#transcript")
    screenshot("live-text")

    wait_status(driver, "completed", "the run to complete")
    wait_for(driver, lambda d: STORY in text_of(d, "#transcript"), "the committed turn")
    wait_for(driver, lambda d: not text_of(d, "#live-text"), "the live text to be cleared")
    texts = [s["text"] for s in live_snapshots(driver) if s["text"]]
    assert len(texts) >= 2, texts  # it grew while the model wrote
    assert all(STORY.startswith(t) for t in texts), texts


def test_live_text_of_a_retried_attempt_replaces_the_first_attempts(
    driver: Any, inspector: Inspector, slow_stream: None
) -> None:
    """The model's stream breaks after 8 chunks: the step streams again under attempt 2, whose
    text replaces attempt 1's instead of following it."""
    inspector.stack.schedule_model_faults("midstream:8")
    run_id = inspector.start_run("tell me about the harbour at night", "narrator")
    open_run(driver, inspector, run_id)
    record_live_text(driver)
    wait_status(driver, "completed", "the retried run to complete")
    wait_for(driver, lambda d: not text_of(d, "#live-text"), "the live text to be cleared")
    assert inspector_step(inspector, run_id, "0000-model")["attempts"] == 2
    seen = [(s["attempt"], s["text"]) for s in live_snapshots(driver) if s["text"]]
    attempts = [attempt for attempt, _ in seen]
    # Attempt 2 follows at once (the retry is in the request): the page may never have drawn
    # attempt 1's text, but it never draws a lower attempt after a higher one.
    assert "2" in attempts and attempts == sorted(attempts), seen
    # Attempt 2 started over: appended to attempt 1's, its text would not be the story's start.
    assert all(STORY.startswith(text) for _, text in seen), seen
    assert seen[-1][0] == "2", seen
    assert STORY in text_of(driver, "#transcript")


def test_a_call_decided_elsewhere_first_answers_409_in_the_panel(
    driver: Any, inspector: Inspector
) -> None:
    """The call is approved through the API while the page still shows it waiting (its reads
    of the run fail until then): the page's rejection is refused, and the panel says why."""
    run_id = inspector.start_run("pay 7 to Grace", "approval-demo")
    open_run(driver, inspector, run_id)
    panel = approval_panel(driver, "0000-tool-000")
    driver.execute_script("""
        const [real, run] = [window.fetch, `/runs/${arguments[0]}`];
        window.realFetch = real;
        window.fetch = (url, options) => (String(url) === run
          ? Promise.reject(new TypeError("held back by the test")) : real(url, options));""",
                          run_id)
    decided = inspector.api("POST", f"/runs/{run_id}/approvals/0000-tool-000",
                            json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    panel.find_element(By.CSS_SELECTOR, "button.reject").click()
    outcome = panel.find_element(By.CSS_SELECTOR, ".outcome")
    wait_for(driver, lambda _: "already decided: approve by anonymous" in outcome.text,
             "the API's 409 in the panel")
    assert not panel.find_element(By.CSS_SELECTOR, "button.reject").is_enabled()
    driver.execute_script("window.fetch = window.realFetch")
    wait_status(driver, "completed", "the run, approved elsewhere, to complete")
    assert "already decided" in outcome.text  # the panel stays, saying why


def test_a_wait_for_an_event_is_named_and_gets_no_decision_panel(
    driver: Any, inspector: Inspector
) -> None:
    """A payment that waits for approval beside a receipt that waits for an event: the status
    names both, only the approval has a panel; approved there and the event sent, the run
    completes."""
    run_id = inspector.start_run("pay 5 to Ada and wait for the receipt", "approval-demo")
    open_run(driver, inspector, run_id)
    wait_for(driver, lambda d: "waiting for a decision, event receipt:Ada" in text_of(
        d, "#run-status"), "both waits in the status")
    panel = approval_panel(driver, "0000-tool-000")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#approvals div.approval")) == 1
    panel.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_for(driver, lambda _: "Approved by anonymous" in text_of(driver, "#approvals .outcome"),
             "the approval recorded")
    wait_for(driver, lambda d: text_of(d, "#run-status").endswith("waiting for event receipt:Ada"),
             "the status: the event alone")
    sent = inspector.api("POST", f"/runs/{run_id}/events/receipt:Ada",
                         json={"payload": {"note": "got it"}})
    assert sent.status_code < 300, sent.text
    wait_status(driver, "completed", "the run to complete once the event came")
    assert "got it" in text_of(driver, "#answer")


def child_lanes(driver: Any) -> list[dict[str, Any]]:
    """The timeline's child runs, each with the step of the lane just above it, in one go."""
    lanes: list[dict[str, Any]] = driver.execute_script("""
        return [...document.querySelectorAll('#timeline .lane.child-run')].map(lane => {
          const above = lane.previousElementSibling?.querySelector('.bar');
          const link = lane.querySelector('a.child-link');
          return {run: lane.dataset.childRun, step: lane.dataset.parentStep,
                  above: above ? above.dataset.step : null, agent: link.textContent,
                  href: link.getAttribute('href'), status: lane.dataset.status,
                  badge: lane.querySelector('.badge').textContent,
                  cost: lane.querySelector('.child-cost').textContent};
        });""")
    return lanes


def test_a_parent_run_shows_its_child_runs_under_their_steps_and_a_child_links_back(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    """``lead`` asks ``scout`` and ``checker`` at once: each call is a child run, shown under
    the step that started it with its agent, status and cost (the children's sum apart in the
    cost); a child's link opens its page, which links back to its parent."""
    run_id = inspector.start_run("survey the north field", "lead")
    open_run(driver, inspector, run_id)
    wait_for(driver, lambda d: len(child_lanes(d)) == 2, "two child runs in the timeline")
    wait_status(driver, "completed", "the lead's run to complete")
    view = inspector.run(run_id)
    assert view["answer"] == ("Scout: Scouted: north-field is dry. Checker: No faults found.")
    children = {c["agent"]: c for c in view["children"]}
    assert [c["agent"] for c in view["children"]] == ["scout", "checker"]
    # Each child shows as it ended (the page re-read the run as the children went on).
    lanes = wait_for(driver, lambda d: (found := child_lanes(d))
                     and all(lane["status"] == "completed" for lane in found) and found,
                     "both child runs shown completed")
    for lane, step in zip(lanes, ("0000-tool-000", "0000-tool-001"), strict=True):
        child = children[lane["agent"]]
        assert (lane["run"], lane["step"], lane["above"], lane["badge"]) == (
            child["run_id"], step, step, "completed"), lane
        assert lane["href"] == f"#/runs/{child['run_id']}"
        assert float(lane["cost"].lstrip("$")) == pytest.approx(child["cost"]["usd"], abs=1e-6)
    apart = view["children_cost"]["usd"]
    assert apart == pytest.approx(sum(c["cost"]["usd"] for c in view["children"]))
    wait_for(driver, lambda d: "Child runs" in text_of(d, "#cost")
             and "2 child runs" in text_of(d, "#cost"), "the children's cost, apart")
    assert not driver.find_element(By.ID, "parent-run").is_displayed()  # a run of its own
    # The cost (the children's apart) and the timeline (the children under their steps).
    driver.execute_script("document.getElementById('cost').previousElementSibling"
                          ".scrollIntoView()")
    screenshot("run-with-child-runs")

    scout = children["scout"]
    driver.find_element(By.CSS_SELECTOR, f'a.child-link[href="#/runs/{scout["run_id"]}"]').click()
    wait_for(driver, lambda d: d.current_url.endswith(f"#/runs/{scout['run_id']}"),
             "the scout's page")
    wait_status(driver, "completed", "the scout's run view")
    wait_for(driver, lambda d: run_id in text_of(d, "#parent-run"), "the link to its parent")
    assert "started by its step 0000-tool-000" in text_of(driver, "#parent-run")
    assert not child_lanes(driver)
    wait_for(driver, lambda d: "Scouted: north-field is dry." in text_of(d, "#answer"),
             "the scout's answer")
    driver.find_element(By.ID, "parent-link").click()
    wait_for(driver, lambda d: d.current_url.endswith(f"#/runs/{run_id}")
             and len(child_lanes(d)) == 2, "back on the lead's page")

    on_phone(driver)
    wait_for(driver, lambda d: len(child_lanes(d)) == 2, "the child runs on a phone")
    assert_fits(driver)
