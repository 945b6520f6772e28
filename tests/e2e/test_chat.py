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
                       "/help", "pay 30 to Bo and show me the balance", "n",
                       "/file photo.png", "what is in the photo?"]) + "\n"
    # The photo's question is the last line: however the model takes it (a description of the
    # file, or a payment that waits for an approval nobody is left to give), the chat ends at
    # the end of its input.
    done = await asyncio.to_thread(
        subprocess.run, [ACKLOOP, "chat", "--agent", "approval-demo",
                         "--directory", stack.state.directory],
        input=typed, capture_output=True, text=True, timeout=180, env=user_env(home), cwd=home)
    assert done.returncode == 0, done.stderr
    # stdout: the answers, in order.
    answers = done.stdout.splitlines()
    assert answers[0] == 'send_payment: {"result": {"amount": 40, "paid": "Ada", "status": "sent"}}'
    assert answers[1].startswith('send_payment: {"error": "not run: rejected by ')
    assert 'account_balance: {"result": {"balance": 1000}}' in answers[1]
    err = done.stderr
    assert err.count('approve send_payment({"amount": 40, "to": "Ada"})') == 2  # after "maybe"
    assert "answer y (approve), n (reject) or e {JSON}" in err and "/file PATH" in err
    assert "attached photo.png to the next question" in err
    run_ids = re.findall(r"^run (run-[0-9a-f]+) completed", err, re.MULTILINE)
    assert len(run_ids) >= 2 and err.count("conversation ") == 1
    store = stack.store()
    runs = sorted(await store.runs.list_runs(run_ids[0]), key=lambda r: r.created_at)
    assert [r.run_id for r in runs[:2]] == run_ids[:2]
    assert len(runs) == 3 and {r.conversation_id for r in runs} == {run_ids[0]}  # one conversation
    assert [len(r.files) for r in runs] == [0, 0, 1]            # the photo went with the third
    bo = await store.steps.list_steps(run_ids[1])
    assert [s.decision.decision for s in bo if s.decision is not None] == ["reject"]
