"""The issue's targets, evaluated on the figures of one chaos run."""

from __future__ import annotations

from typing import Any

DEFAULT_MIN_RUNS = 200
DEFAULT_MAX_WALL_S = 600.0
QUICK_MAX_WALL_S = 180.0


def _target(name: str, met: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "met": bool(met), "detail": detail}


def evaluate_targets(f: dict[str, Any], *, quick: bool) -> list[dict[str, Any]]:
    """One entry per target: name, met, detail."""
    out, checks, rec = f["outcome"], f["checks"], f["recovery"]
    dups = checks["duplicate_executions"]
    wall_limit = QUICK_MAX_WALL_S if quick else DEFAULT_MAX_WALL_S
    targets = [
        _target("lost runs = 0", out["lost"] == 0, str(out["lost"])),
        _target("stuck runs = 0", out["stuck"] == 0, str(out["stuck"])),
        _target("duplicate recorded steps = 0", checks["duplicate_recorded_steps"] == 0
                and checks["history_gaps"] == 0,
                f"{checks['duplicate_recorded_steps']} duplicates, {checks['history_gaps']} gaps"),
        _target("duplicate executions only at kills", dups["outside_kills"] == 0,
                f"{dups['outside_kills']} outside kills"),
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
        _target(f"wall time <= {wall_limit:.0f} s", f["wall_s"] <= wall_limit, f"{f['wall_s']} s"),
    ]
    if not quick:
        targets.append(_target(f"runs >= {DEFAULT_MIN_RUNS}", f["runs"] >= DEFAULT_MIN_RUNS,
                               str(f["runs"])))
    dl = f["dead_letter"]
    if "skipped" not in dl:
        targets.append(_target("dead letter -> failed with cause -> redrive, no duplicate",
                               dl.get("ok", False), str(dl.get("problems") or "ok")))
    ours, temporal = rec["ackloop"], rec["temporal"]
    if "seed" in temporal and "tuned" in temporal and ours["n"]:
        seed, tuned = temporal["seed"]["p50"], temporal["tuned"]["p50"]
        targets.append(_target("recovery p50 faster than Temporal (seed settings)",
                               ours["p50"] < seed, f"{ours['p50']} s vs {seed} s"))
        targets.append(_target("recovery p50 within 2x of tuned Temporal",
                               ours["p50"] <= 2 * tuned, f"{ours['p50']} s vs 2 x {tuned} s"))
    return targets


def all_met(targets: list[dict[str, Any]]) -> bool:
    return all(t["met"] for t in targets)
