"""The chaos table, as printed by ``ackloop chaos``."""

from __future__ import annotations

from typing import Any


def _row(label: str, value: object, indent: int = 0) -> str:
    return f"{' ' * indent}{label:<{52 - indent}} {value}"


def _kv(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(values.items())) or "0"


def _dist(d: dict[str, Any]) -> str:
    return f"p50 {d.get('p50', 0):>6} s   p95 {d.get('p95', 0):>6} s   (n={d.get('n', '?')})"


def format_report(f: dict[str, Any]) -> str:
    """The whole table."""
    c, faults, out, checks, rec = f["config"], f["faults"], f["outcome"], f["checks"], f["recovery"]
    d = faults["deliveries"]
    dups = checks["duplicate_executions"]
    poison = checks["poison"]
    lines = [
        f"ackloop chaos: {f['runs']} runs, concurrency {c['concurrency']}, lease "
        f"{f['lease_seconds']:g} s, seed {c['seed']}, {f['cpus']} CPUs; fault phase "
        f"{f['fault_phase_s']} s, total wall {f['wall_s']} s",
        f"command: {f['command']}",
        "",
        _row("Runs", f["runs"]),
        "Faults injected",
        _row("push deliveries duplicated (sequential/concurrent)",
             f"{d.get('duplicated_sequentially', 0) + d.get('duplicated_concurrently', 0)} "
             f"({d.get('duplicated_sequentially', 0)}/{d.get('duplicated_concurrently', 0)})", 2),
        _row("function answers non-2xx -> Pub/Sub redelivery", d.get("non_2xx_answers", 0), 2),
        _row("SIGKILL + restart, by point", _kv(faults["kills"]), 2),
        _row("model faults (bursts)", f"{_kv(faults['model'])} ({faults['model_bursts']} bursts)",
             2),
        _row("tool API faults", f"weather.gov 500 {faults['tool']['nws_500']}, ip-api timeout "
             f"{faults['tool']['ipapi_timeouts']}", 2),
        _row("poison messages (published/posted to endpoints)",
             f"{faults['poison']['published']}/{faults['poison']['posted_to_endpoints']}", 2),
        "Outcome",
        _row("completed", out["completed"], 2),
        _row("failed with reason", f"{out['failed']} ({_kv(out['failed_reasons'])})", 2),
        _row("stuck (not finished in the bounded wait)", out["stuck"], 2),
        _row("lost (no run, or no answer message)", out["lost"], 2),
        "Checks",
        _row("answers equal to the fault-free run's",
             f"{checks['answers_equal_fault_free']}/{checks['answers_compared']}", 2),
        _row("history complete and in order", f"{checks['history_ok']}/{f['runs']}", 2),
        _row("duplicate recorded steps / gaps",
             f"{checks['duplicate_recorded_steps']} / {checks['history_gaps']}", 2),
        _row("duplicate executions (model/tool)", f"{dups['model'] + dups['tool']} "
             f"({dups['model']}/{dups['tool']}); outside kills {dups['outside_kills']}", 2),
        _row("steps in flight at a kill / ran twice",
             f"{checks['steps_in_flight_at_kill']} / {checks['in_flight_ran_twice']}", 2),
        _row("tool requests: sandbox / logged executions",
             f"{checks['tool_requests']['sandbox']} / "
             f"{checks['tool_requests']['logged_executions']}", 2),
        _row("model requests with a malformed context", checks["model_context_anomalies"], 2),
        _row("secrets in logs / in model context",
             f"{sum(checks['secrets_in_logs'].values())} / {checks['secrets_in_model_context']}",
             2),
        _row("poison recorded once / edge answers 400+200",
             f"{poison['recorded_once']}/{poison['expected_records']} / "
             f"{poison['edge_answers_ok']}/{poison['edge_functions']}", 2),
    ]
    dl = f["dead_letter"]
    if "skipped" not in dl:
        lines.append(_row("dead letter -> run failed -> redrive -> completed",
                          f"{'ok' if dl['ok'] else 'FAILED'} (dead-lettered after "
                          f"{dl['seconds_to_dead_letter']} s; model answers per turn "
                          f"{dl['model_answers_per_turn']}; 2nd redrive "
                          f"{dl['second_redrive'] or 'nothing to do'})", 2))
    lines += ["Recovery after a SIGKILL (kill -> run complete)",
              _row(f"ackloop (lease {f['lease_seconds']:g} s)", _dist(rec["ackloop"]), 2),
              _row("  of which process restart", _dist(rec["restart_s"]), 2)]
    for mode, label in (("seed", "Temporal, seed settings"), ("tuned", "Temporal, tuned")):
        t = rec["temporal"].get(mode)
        if t:
            lines.append(_row(f"{label} ({_settings(t['settings'])})",
                              f"p50 {t['p50']:>6} s   p95 {t['p95']:>6} s   "
                              f"(n={t['runs']}, in-flight executions {t['in_flight_executions']})",
                              2))
    if rec.get("temporal_skipped"):
        lines.append(_row("Temporal", f"SKIPPED: {rec['temporal_skipped']}", 2))
    lines.append("Targets")
    lines += [_row(t["name"], f"{'MET' if t['met'] else 'NOT MET'}  ({t['detail']})", 2)
              for t in f["targets"]]
    if f["problems"]:
        lines.append("Problems (first 30)")
        lines += [f"  {p}" for p in f["problems"]]
    return "\n".join(lines)


def _settings(s: dict[str, Any]) -> str:
    hb = s.get("heartbeat_timeout_s")
    return (f"start-to-close {s.get('tool_start_to_close_s'):g} s"
            + (f", heartbeat {hb:g} s" if hb else ", no heartbeat"))
