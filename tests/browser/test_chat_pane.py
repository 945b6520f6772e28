"""The inspector's chat pane (``#/chat``) in headless Chromium, on the browser tests' stack: a
question asked from the page with a file attached, its payment approved inline, a follow-up in
the same conversation rejected inline, and an answer shown as it is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

from tests.browser.agents import STORY
from tests.browser.conftest import Inspector
from tests.browser.test_inspector import (
    approval_panel,
    assert_fits,
    on_phone,
    text_of,
    wait_for,
)
from tests.engine.test_tool_files import png

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]

Screenshot = Callable[[str], Path]


def open_chat(driver: Any, inspector: Inspector, agent: str) -> None:
    """A new conversation with ``agent``, picked from the list the API gave."""
    driver.get(f"{inspector.url}/ui#/chat")
    wait_for(driver, lambda d: d.find_elements(
        By.CSS_SELECTOR, f'#chat-agent option[value="{agent}"]'), f"{agent} among the agents")
    Select(driver.find_element(By.ID, "chat-agent")).select_by_value(agent)


def ask(driver: Any, question: str) -> None:
    """Type the question, then Enter (which sends it)."""
    field = driver.find_element(By.ID, "chat-input")
    field.send_keys(question)
    field.send_keys(Keys.ENTER)


def turns(driver: Any) -> list[dict[str, Any]]:
    """The conversation's turns as the page shows them, read in one go."""
    found: list[dict[str, Any]] = driver.execute_script("""
        return [...document.querySelectorAll('#chat-log li.turn')].map(turn => ({
          run: turn.dataset.runId, status: turn.dataset.status || '',
          question: turn.querySelector('.question-text').innerText,
          live: turn.querySelector('.live-text').innerText,
          answer: turn.querySelector('.answer').innerText,
          waiting: turn.querySelectorAll('.approval:not([data-decided])').length,
          href: turn.querySelector('a.turn-run').getAttribute('href')}));""")
    return found


def turn_where(driver: Any, index: int, condition: Callable[[dict[str, Any]], bool], what: str
               ) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        driver, lambda d: len(shown := turns(d)) > index and condition(shown[index])
        and shown[index], what)
    return found


def panel(driver: Any, index: int) -> Any:
    """The decision panel of the payment the ``index``-th turn's run asks for."""
    return approval_panel(driver, "0000-tool-000", f"#chat-log li.turn:nth-child({index + 1})")


def test_a_payment_asked_in_the_chat_is_approved_inline_and_a_follow_up_keeps_the_conversation(
    driver: Any, inspector: Inspector, screenshot: Screenshot, tmp_path: Path
) -> None:
    receipt = tmp_path / "receipt.png"
    receipt.write_bytes(png(96, 64))
    open_chat(driver, inspector, "approval-demo")
    assert driver.find_element(By.CSS_SELECTOR, 'nav a[href="#/chat"]').get_attribute(
        "aria-current") == "page"
    ask(driver, "pay 40 to Ada")

    first = turn_where(driver, 0, lambda t: t["waiting"] == 1, "the payment waiting for approval")
    conversation = driver.current_url.rsplit("#/chat/", 1)[1]
    assert first["question"] == "pay 40 to Ada" and first["href"] == f"#/runs/{first['run']}"
    decision = panel(driver, 0)
    assert "send_payment" in decision.find_element(By.CSS_SELECTOR, "h3").text
    args = decision.find_element(By.CSS_SELECTOR, "textarea.args").get_attribute("value")
    assert json.loads(args) == {"to": "Ada", "amount": 40}
    decision.find_element(By.CSS_SELECTOR, "button.approve").click()
    first = turn_where(driver, 0, lambda t: t["status"] == "completed", "the approved run's end")
    assert '"amount": 40' in first["answer"] and '"status": "sent"' in first["answer"]
    assert "Approved by anonymous" in text_of(driver, "#chat-log li.turn .outcome")

    ask(driver, "pay 5 to Bo")
    decision = panel(driver, 1)
    decision.find_element(By.CSS_SELECTOR, "textarea.comment").send_keys("Bo is paid already")
    decision.find_element(By.CSS_SELECTOR, "button.reject").click()
    second = turn_where(driver, 1, lambda t: t["status"] == "completed", "the follow-up's end")
    assert "not run: rejected by anonymous (Bo is paid already)" in second["answer"]

    # A third question with a file: the file goes with it and shows with it, loaded through the
    # API (what the model makes of it is the model's: a description, or another payment).
    driver.find_element(By.ID, "chat-files").send_keys(str(receipt))
    wait_for(driver, lambda d: "receipt.png" in text_of(d, "#chat-attached"), "the attached file")
    ask(driver, "what is on this receipt?")
    turn_where(driver, 2, lambda t: bool(t["run"]), "the third question's run")
    assert not text_of(driver, "#chat-attached")  # sent with the question
    wait_for(driver, lambda d: d.execute_script(
        "const img = document.querySelector('#chat-log li.turn:nth-child(3) .thumbnail');"
        "return img && img.complete && img.naturalWidth === 96"), "the attached file's thumbnail")
    driver.set_window_size(1280, 1500)  # the whole conversation, and the composer under it
    screenshot("chat-pane")

    # Through the API: two runs, one conversation (the one the page's address names).
    runs = [inspector.run(t["run"]) for t in turns(driver)]
    assert [r["text"] for r in runs] == ["pay 40 to Ada", "pay 5 to Bo", "what is on this receipt?"]
    assert {r["conversation_id"] for r in runs} == {conversation}
    assert [r["agent"] for r in runs] == ["approval-demo"] * 3
    assert [len(r.get("files") or []) for r in runs] == [0, 0, 1]
    assert runs[2]["files"][0]["file_data"]["display_name"] == "receipt.png"
    listed = inspector.api("GET", f"/conversations/{conversation}/runs").json()["runs"]
    assert [r["run_id"] for r in listed] == [r["run_id"] for r in runs]

    # The conversation's address shows it again, as it ended.
    driver.get(f"{inspector.url}/ui#/")
    driver.get(f"{inspector.url}/ui#/chat/{conversation}")
    wait_for(driver, lambda d: [t["status"] for t in turns(d)][:2] == ["completed", "completed"],
             "the turns, reloaded")
    assert Select(driver.find_element(By.ID, "chat-agent")).first_selected_option.get_attribute(
        "value") == "approval-demo"
    on_phone(driver)
    wait_for(driver, lambda d: len(turns(d)) == 3, "the conversation on a phone")
    assert_fits(driver)


def test_the_answer_shows_in_the_chat_as_it_is_written(
    driver: Any, inspector: Inspector, slow_stream: None
) -> None:
    open_chat(driver, inspector, "narrator")
    ask(driver, "tell me about the harbour")
    writing = turn_where(driver, 0, lambda t: bool(t["live"]), "the text being written")
    assert writing["status"] in ("queued", "running"), writing
    assert STORY.startswith(writing["live"]) and len(writing["live"]) < len(STORY), writing
    done = turn_where(driver, 0, lambda t: t["status"] == "completed" and not t["live"],
                      "the answer, once written")
    assert done["answer"] == STORY


def test_a_conversation_handed_to_another_agent_goes_on_with_it(
    driver: Any, inspector: Inspector
) -> None:
    """``research-team`` hands its conversation to ``writer`` (an agent no query names): the
    pane offers to go on with the writer, and the follow-up is the writer's."""
    open_chat(driver, inspector, "research-team")
    ask(driver, "the 1850 census")
    turn_where(driver, 0, lambda t: t["status"] == "completed", "the team's answer")
    chosen = wait_for(driver, lambda d: (o := Select(d.find_element(By.ID, "chat-agent"))
                                         .first_selected_option).get_attribute("value")
                      == "default" and o.text, "the hand-off offered")
    assert chosen == "writer (handed the conversation)"
    ask(driver, "and what of 1860?")
    second = turn_where(driver, 1, lambda t: t["status"] == "completed", "the writer's answer")
    follow_up = inspector.run(second["run"])
    assert follow_up["agent"] == "writer"
    assert second["answer"].startswith("On 'and what of 1860?', from the findings so far:")
