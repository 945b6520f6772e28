"""``ackloop schedules`` against a stack named by ``--directory`` (the emulators behind its
state file): create, list, show, pause, resume, trigger, backfill, delete, and an invalid
spec refused in one line."""

from __future__ import annotations

import json
import uuid

from google.cloud import pubsub_v1

from tests.cli.conftest import Cli, FakeStack


def test_the_schedules_commands_against_a_stack(cli: Cli, fake_stack: FakeStack) -> None:
    queries = f"q-{uuid.uuid4().hex[:8]}"  # the topic a trigger and a backfill publish to
    fake_stack.state.env["ACKLOOP_QUERIES_TOPIC"] = queries
    fake_stack.state.save()
    publisher = pubsub_v1.PublisherClient()
    publisher.create_topic(name=publisher.topic_path(fake_stack.state.project_id, queries))
    d = str(fake_stack.directory)
    created = cli("schedules", "create", "nightly", "--text", "digest", "--cron", "0 2 * * *",
                  "--time-zone", "Europe/Paris", "--overlap", "buffer_one", "--json",
                  "--directory", d)
    assert created.returncode == 0, created.stderr
    view = json.loads(created.stdout)
    assert view["source"] == "api" and len(view["next_firings"]) == 5
    listed = cli("schedules", "list", "--directory", d)
    assert "nightly" in listed.stdout, listed.stderr
    paused = json.loads(cli("schedules", "pause", "nightly", "--json", "--directory", d).stdout)
    assert paused["paused"] is True and paused["next_firings"] == []
    resumed = json.loads(cli("schedules", "resume", "nightly", "--json", "--directory",
                             d).stdout)
    assert resumed["paused"] is False
    triggered = cli("schedules", "trigger", "nightly", "--json", "--directory", d)
    assert triggered.returncode == 0, triggered.stderr
    fired = json.loads(triggered.stdout)
    assert fired["outcome"] == "published" and fired["run_id"].startswith("run-")
    backfilled = cli("schedules", "backfill", "nightly", "--start", "2025-01-01T00:00:00Z",
                     "--end", "2025-01-03T00:00:00Z", "--json", "--directory", d)
    assert backfilled.returncode == 0, backfilled.stderr
    assert len(json.loads(backfilled.stdout)["runs"]) == 2
    shown = cli("schedules", "show", "nightly", "--directory", d)
    assert "backfill" in shown.stdout  # the trigger is recorded once the stack fires it
    assert cli("schedules", "delete", "nightly", "--directory", d).returncode == 0
    gone = cli("schedules", "show", "nightly", "--directory", d)
    assert gone.returncode != 0 and "no schedule 'nightly'" in gone.stderr
    invalid = cli("schedules", "create", "bad", "--text", "x", "--cron", "0 2 * *",
                  "--directory", d)
    assert invalid.returncode != 0 and "give five" in invalid.stderr
