"""``ackloop chat`` on a stack of real processes, typed into as a user types: one conversation
across questions, a payment approved and another rejected at the prompt, a file attached."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from tests.agents.test_traps import PNG
from tests.cli.conftest import ACKLOOP, user_env
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator]


async def test_a_chat_is_one_conversation_with_approvals_asked_inline_and_files(
        stack: RunningStack, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "photo.png").write_bytes(PNG)
    typed = "\n".join(["pay 40 to Ada", "maybe", "y",          # a wrong answer is asked again
                       "/help", "pay 30 to Bo", "n",
                       "/file photo.png", "pay 5 to Cy and show me the balance", "y",
                       "/quit", "never asked"]) + "\n"
    done = await asyncio.to_thread(
        subprocess.run, [ACKLOOP, "chat", "--agent", "approval-demo",
                         "--directory", stack.state.directory],
        input=typed, capture_output=True, text=True, timeout=180, env=user_env(home), cwd=home)
    assert done.returncode == 0, done.stderr
    # stdout: the answers alone, in order.
    answers = done.stdout.splitlines()
    assert answers[0] == 'send_payment: {"result": {"amount": 40, "paid": "Ada", "status": "sent"}}'
    assert answers[1].startswith('send_payment: {"error": "not run: rejected by ')
    assert answers[2].startswith('send_payment: {"result": {"amount": 5, "paid": "Cy"')
    assert 'account_balance: {"result": {"balance": 1000}}' in answers[2]
    assert len(answers) == 3
    err = done.stderr
    assert err.count("approve send_payment(") == 4   # Ada twice (after "maybe"), Bo, Cy
    assert "answer y (approve), n (reject) or e {JSON}" in err and "/file PATH" in err
    assert "never asked" not in err + done.stdout
    run_ids = re.findall(r"^run (run-[0-9a-f]+) completed", err, re.MULTILINE)
    assert len(run_ids) == 3
    store = stack.store()
    runs = [await store.runs.get_run(r) for r in run_ids]
    assert all(r is not None for r in runs)
    assert {r.conversation_id for r in runs if r} == {run_ids[0]}   # one conversation
    assert err.count("conversation ") == 1
    assert [len(r.files) for r in runs if r] == [0, 0, 1]            # the file went with the 3rd
    bo = await store.steps.list_steps(run_ids[1])
    decided = [s.decision for s in bo if s.decision is not None]
    assert [d.decision for d in decided] == ["reject"]
