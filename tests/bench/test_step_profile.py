"""The step profile's arithmetic: run lengths, per-step figures, model turns cut from the trace,
counts and CPU attributed to a turn, and the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.emulators import EmulatorSession

from ackloop_dev.bench.step_profile import (
    ProfileConfig,
    cpu_at,
    measure,
    model_turns,
    parse_ints,
    per_step,
    render,
    summed,
    tool_calls_for,
    turn_profile,
    turn_window,
    wire_totals,
)
from ackloop_dev.bench.wire_meter import WireCounts


def test_a_run_of_2n_plus_1_steps_makes_n_tool_calls() -> None:
    assert [tool_calls_for(k) for k in (1, 11, 51, 101)] == [0, 5, 25, 50]
    with pytest.raises(ValueError, match="odd"):
        tool_calls_for(10)


def test_lengths_parse_and_totals_divide_by_steps() -> None:
    assert parse_ints("11, 51,101,") == (11, 51, 101)
    assert per_step({"docs_written": 37.0, "published": 12.0}, 11) == {
        "docs_written": 3.364, "published": 1.091}
    assert per_step({"x": 5.0}, 0) == {"x": 0.0}


def test_wire_totals_count_deletes_as_documents_written() -> None:
    counts = WireCounts(firestore_calls=9, firestore_writes=4, firestore_deletes=1,
                        firestore_write_bytes=1200, docs_found=2, firestore_reads=3,
                        published=2, transactions=1)
    assert wire_totals(counts) == {"firestore_round_trips": 9, "transactions": 1, "docs_read": 3,
                                   "docs_written": 5, "bytes_written": 1200, "published": 2}


def _span(name: str, step: str, start: float, end: float) -> dict[str, Any]:
    return {"name": name, "span_id": f"{step}{start}", "start": start, "end": end,
            "attributes": {"ackloop.step": step}}


def test_model_turns_are_model_deliveries_in_order_and_a_redelivery_is_one_turn() -> None:
    spans = [_span("ackloop.model_step", "m1", 3.0, 3.5),
             _span("ackloop.tool_step", "t0", 2.0, 2.5),
             _span("ackloop.model_step", "m0", 1.0, 1.2),
             _span("ackloop.model_step", "m1", 4.0, 4.4),  # redelivered
             _span("pubsub.publish", "m0", 1.1, 1.15)]
    assert model_turns(spans) == [(1.0, 1.2), (3.0, 4.4)]


def test_counts_are_summed_in_a_half_open_window() -> None:
    events = [(1.0, "firestore_calls", 1), (1.5, "firestore_write_bytes", 300),
              (2.0, "firestore_calls", 1)]
    assert summed(events, 1.0, 2.0) == {"firestore_calls": 1, "firestore_write_bytes": 300}


def test_cpu_at_takes_the_last_sample_not_after_the_time() -> None:
    samples = [(1.0, 0.5), (2.0, 0.52), (3.0, 0.6)]
    assert cpu_at(samples, 0.5) == 0.5
    assert cpu_at(samples, 2.5) == 0.52
    assert cpu_at(samples, 9.0) == 0.6
    assert cpu_at([], 1.0) == 0.0


def test_a_turn_window_shifts_back_at_the_end_of_the_run() -> None:
    turns = [(float(i), i + 0.5) for i in range(6)]
    assert turn_window(turns, 0, 3, 99.0) == (0, 2, 0.0, 3.0)
    assert turn_window(turns, 5, 3, 99.0) == (3, 5, 3.0, 99.0)
    assert turn_window(turns, 2, 10, 99.0) == (0, 5, 0.0, 99.0)


def test_a_turn_gets_the_counts_until_the_next_model_step_and_its_window_cpu() -> None:
    turns = [(0.0, 0.1), (1.0, 1.1), (2.0, 2.2)]
    events = [(0.05, "firestore_calls", 1), (0.06, "docs_found", 2),
              (0.07, "firestore_writes", 3), (0.08, "firestore_write_bytes", 900),
              (0.08, "firestore_top_write_bytes", 300),
              (0.5, "firestore_calls", 1),  # after its span, before the next model step: its own
              (1.05, "firestore_calls", 1)]
    samples = [(0.0, 1.0), (1.0, 1.012), (2.0, 1.020), (3.0, 1.040)]
    row = turn_profile(turns, events, samples, 0, 2, 3.0)
    assert row == {"turn": 0, "span_ms": 100.0, "firestore_round_trips": 2, "docs_read": 2,
                   "docs_written": 3, "bytes_written": 900, "top_level_bytes_written": 300,
                   "cpu_ms": 10.0, "cpu_window": [0, 1]}
    last = turn_profile(turns, events, samples, 2, 2, 3.0)
    assert (last["firestore_round_trips"], last["cpu_window"], last["cpu_ms"]) == (0, [1, 2], 14.0)


def test_render_shows_each_length_and_turn() -> None:
    per = {"function_cpu_ms": 11.3, "function_cpu_ms_net_of_idle": 9.0,
           "firestore_round_trips": 3.73, "transactions": 0.0,
           "docs_read": 3.0, "docs_written": 3.36, "bytes_written": 3300.0, "published": 1.09,
           "function_spans": 4.27, "spans": 4.27}
    result = {
        "config": {"runs": 2, "model_seconds": 0.0, "tool_seconds": 0.0},
        "lengths": [{"steps_per_run": 11, "per_step": per,
                     "counted_by_functions_per_step": {"requests": 3.73},
                     "function_cpu_ms_by_function": {"model_step": 6.0}}],
        "turns": {"steps_per_run": 11, "model_turns": 6, "cpu_window": 2, "rows": [
            {"turn": 0, "span_ms": 50.0, "firestore_round_trips": 4, "docs_read": 2,
             "docs_written": 4, "bytes_written": 3223, "cpu_ms": 15.0, "cpu_window": [0, 1]}]},
        "cold_start": {"model_step": {"seconds": 3.8, "cpu_s": 1.35}},
    }
    table = render(result)
    assert "        11            11.3               9            3.73" in table
    assert "3223" in table and "turns 0-1" in table
    assert "model_step 3.8 s, 1.35 s CPU" in table


@pytest.mark.emulator
def test_a_tiny_profile_on_the_local_stack(emulator_session: EmulatorSession,
                                           tmp_path: Path) -> None:
    config = ProfileConfig(steps=(3,), runs=1, turns=(0, 1), cpu_window=1, cold_starts=0,
                           warmup_steps=0, run_timeout_s=60.0)
    result = measure(tmp_path, config,
                     pubsub_host=f"127.0.0.1:{emulator_session.pubsub_port}",
                     firestore_host=f"127.0.0.1:{emulator_session.firestore_port}")
    (length,) = result["lengths"]
    assert length["steps"] == 3
    per = length["per_step"]
    assert per["firestore_round_trips"] > 0 and per["docs_written"] > 0
    assert per["bytes_written"] > 0 and per["function_cpu_ms"] > 0
    assert per["function_spans"] >= 1  # at least each step's delivery span (one span per delivery)
    turns = result["turns"]
    assert turns["model_turns"] == 2
    assert [row["turn"] for row in turns["rows"]] == [0, 1]
    assert all(row["docs_written"] > 0 for row in turns["rows"])
