"""The issue's targets, evaluated on the figures of one chaos run."""

from __future__ import annotations

from typing import Any

DEFAULT_MIN_RUNS = 200
QUICK_MAX_WALL_S = 540.0
"""``--quick`` runs as a test with a 600 s timeout; its wall time is bounded by the dead-letter
path (the shipped retry policy's backoff at the time factor), the rest runs beside it."""


def _target(name: str, met: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "met": bool(met), "detail": detail}


def _children_target(ch: dict[str, Any]) -> dict[str, Any]:
    name = ("child runs under kills: one child per call, every tree answered as fault-free, "
            "nothing recorded twice, none stuck")
    if "skipped" in ch:
        return _target(name, True, f"skipped: {ch['skipped']}")
    return _target(name, ch.get("ok", False),
                   f"{ch.get('answers_ok')}/{ch.get('trees')} trees, {ch.get('children')} "
                   f"children, kills {ch.get('kills')} (not fired {ch.get('kills_not_fired')}), "
                   f"{ch.get('calls_without_one_child') or ch.get('problems') or 'ok'}")


def _sleeps_target(sl: dict[str, Any]) -> dict[str, Any]:
    name = ("calls that sleep and a schedule's ticks, with their wakes' queue and the tool "
            "step killed: each call woke at or after its time, ran once, answered; no tick "
            "missed, no run doubled; none stuck")
    if "skipped" in sl:
        return _target(name, True, f"skipped: {sl['skipped']}")
    return _target(name, sl.get("ok", False),
                   f"{sl.get('answers_ok')}/{sl.get('runs')} answered, woken by the clock "
                   f"{sl.get('woken_by_clock')}, early {sl.get('woke_early')}, stuck "
                   f"{sl.get('stuck')}, killed {sl.get('killed')}, lateness "
                   f"{sl.get('lateness_s')}; schedule: {sl.get('firings')} firings, missed "
                   f"{sl.get('ticks_missed')}, doubled {sl.get('runs_doubled')}, completed "
                   f"{sl.get('scheduled_runs_completed')}, tick lateness "
                   f"{sl.get('tick_lateness_s')}; {sl.get('problems') or 'ok'}")


def evaluate_targets(f: dict[str, Any], *, quick: bool) -> list[dict[str, Any]]:
    """One entry per target: name, met, detail."""
    out, checks, rec, every = f["outcome"], f["checks"], f["recovery"], f["all_runs"]
    dups = checks["duplicate_executions"]
    targets = [
        _target("lost runs = 0 (every phase)", every["lost"] == 0 and out["lost"] == 0,
                f"{every['lost']} of {every['runs']}"),
        _target("stuck runs = 0 (every phase)", every["stuck"] == 0 and out["stuck"] == 0,
                f"{every['stuck']} of {every['runs']}"),
        _target("runs ended by a crash or a duplicate = 0", out["ended_by_crash_or_duplicate"] == 0,
                f"{out['ended_by_crash_or_duplicate']} (failed by an injected malformed model "
                f"answer, expected: {out['failed_by_injected_model_fault']}; stopped by their "
                f"time budget after a kill, a retry or a fault: "
                f"{out.get('ended_by_budget_slowed', 0)})"),
        _target("transcript overwrites = 0", every["transcript_overwrites"] == 0
                and every["conversation_order_problems"] == 0,
                f"{every['transcript_overwrites']} overwritten turns, "
                f"{every['conversation_order_problems']} order problems in "
                f"{every['conversations']} conversations "
                f"({every['conversations_with_follow_ups']} with follow-ups)"),
        _target("duplicate recorded steps = 0", checks["duplicate_recorded_steps"] == 0
                and checks["history_gaps"] == 0 and every["duplicate_recorded_steps"] == 0,
                f"{checks['duplicate_recorded_steps']} duplicates, {checks['history_gaps']} gaps"),
        _target("duplicate executions only at kills", dups["outside_kills"] == 0
                and every["duplicate_executions"] == 0,
                f"{dups['outside_kills']} outside kills, {every['duplicate_executions']} in the "
                "scenarios"),
        _target("answers equal the fault-free run's",
                checks["answers_equal_fault_free"] == checks["answers_compared"],
                f"{checks['answers_equal_fault_free']}/{checks['answers_compared']}"),
        _target("failed runs carry a reason", "none" not in out["failed_reasons"],
                str(out["failed_reasons"])),
        _target("no secret in logs or model context",
                not checks["secrets_in_logs"] and checks["secrets_in_model_context"] == 0,
                f"logs {checks['secrets_in_logs']}, context {checks['secrets_in_model_context']}"),
        _target("every planned kill fired", not f["faults"]["kills_not_fired"],
                f"not fired: {f['faults']['kills_not_fired']}"),
        _target("follow-ups queued, answered after the first run, in order",
                f["followup"].get("ok", False),
                f"order {f['followup'].get('transcript_order')}, queued "
                f"{f['followup'].get('queued_on_arrival')}, "
                f"{f['followup'].get('problems') or f['followup'].get('order_problems') or 'ok'}"),
        _children_target(f.get("children", {})),
        _sleeps_target(f.get("sleeps", {"skipped": "not run"})),
        _target("429 storm fails no more runs than the retry bound implies",
                f["storm"].get("ok", False),
                f"failed {f['storm'].get('failed')} (implied {f['storm'].get('failures_implied')}:"
                f" storm {f['storm'].get('storm_s')} s vs bound {f['storm'].get('bound_s')} s), "
                f"stuck {f['storm'].get('stuck')}; ended by their budget "
                f"{f['storm'].get('ended_by_budget', 0)}"),
    ]
    if quick:
        targets.append(_target(f"wall time <= {QUICK_MAX_WALL_S:.0f} s",
                               f["wall_s"] <= QUICK_MAX_WALL_S, f"{f['wall_s']} s"))
    else:
        targets.append(_target(f"runs >= {DEFAULT_MIN_RUNS}", f["runs"] >= DEFAULT_MIN_RUNS,
                               str(f["runs"])))
    dl = f["dead_letter"]
    if "skipped" not in dl:
        targets.append(_target(
            "dead letter after the shipped attempts -> failed with cause, end published -> "
            "redrive, no duplicate", dl.get("ok", False),
            str(dl.get("problems") or f"after {dl.get('seconds_to_dead_letter')} s")))
    ours, temporal = rec["ackloop"], rec["temporal"]
    if "seed" in temporal and "tuned" in temporal and ours["n"] and f["timing"]["factor"] == 1:
        # Temporal runs at production time: compared only when ackloop did too (at another
        # factor the report shows the figures side by side, not a verdict).
        seed, tuned = temporal["seed"]["p50"], temporal["tuned"]["p50"]
        targets.append(_target("recovery p50 faster than Temporal (seed settings)",
                               ours["p50"] < seed, f"{ours['p50']} s vs {seed} s"))
        targets.append(_target("recovery p50 within 2x of tuned Temporal",
                               ours["p50"] <= 2 * tuned, f"{ours['p50']} s vs 2 x {tuned} s"))
    return targets


def all_met(targets: list[dict[str, Any]]) -> bool:
    return all(t["met"] for t in targets)
