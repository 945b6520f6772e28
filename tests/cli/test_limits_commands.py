"""``ackloop limits``, ``ackloop limits set`` and ``ackloop limits reset`` as subprocesses, on a
stack named only by ``--directory`` (the Firestore emulator behind its state file): a list set
is shown as in force, with who set it; a bad list is one line that says what to fix and
changes nothing; a reset goes back to the declared limits."""

from __future__ import annotations

import json

import pytest

from ackloop.config.settings import Settings
from ackloop.engine.live_limits import in_force
from tests.cli.conftest import Cli, FakeStack

pytestmark = pytest.mark.emulator


def test_set_show_and_reset_limits_while_running(cli: Cli, fake_stack: FakeStack) -> None:
    d = str(fake_stack.directory)
    shown = cli("limits", "--directory", d)
    assert shown.returncode == 0, shown.stderr
    assert "no limits declared" in shown.stdout and "ackloop limits set" in shown.stdout

    body = json.dumps({"model_quotas": [{"model": "*", "rpm": 120, "mode": "adaptive"}],
                       "concurrency_limits": [{"steps": "model", "key": "tenant",
                                               "limit": 4}]})
    put = cli("limits", "set", body, "--directory", d)
    assert put.returncode == 0, put.stderr
    assert "every process applies it within 10 s" in put.stdout
    assert "model quota any@default (adaptive): rpm 120" in put.stdout
    assert "concurrency: at most 4 model step(s) at once per tenant" in put.stdout
    assert "set while running by cli:" in put.stdout

    bad = cli("limits", "set", '{"model_quotas": [{"model": "*", "rpm": 0}]}',
              "--directory", d)
    assert bad.returncode != 0
    assert "model_quotas.0.rpm" in bad.stderr and "greater than or equal to 1" in bad.stderr
    set_doc = fake_stack.run(lambda store: store.quotas.read_set())
    assert [q.rpm for q in in_force(Settings(), set_doc).model_quotas] == [120]  # unchanged

    reset = cli("limits", "reset", "model_quotas", "--json", "--directory", d)
    assert reset.returncode == 0, reset.stderr
    view = json.loads(reset.stdout)
    assert view["model_quotas"] == [] and view["set"]["lists"] == ["concurrency_limits"]
    unknown = cli("limits", "reset", "quotas", "--directory", d)
    assert unknown.returncode != 0 and "known: model_quotas" in unknown.stderr
