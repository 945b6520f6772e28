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
    t, every = f["timing"], f["all_runs"]
    d, push = faults["deliveries"], faults["push_delivery"]
    dups = checks["duplicate_executions"]
    poison = checks["poison"]
    settings = t["settings"]
    lines = [
        f"ackloop chaos: {f['runs']} runs, concurrency {c['concurrency']}, seed {c['seed']}, "
        f"{f['cpus']} CPUs; fault phase {f['fault_phase_s']} s, total wall {f['wall_s']} s",
        f"command: {f['command']}",
        f"TIME FACTOR {t['factor']:.4g}: every shipped duration x {t['factor']:.4g} "
        f"(1 = production); counts as shipped",
        f"  shipped, scaled: lease {settings['lease_seconds']:g} s, claim wait "
        f"{settings['claim_wait_seconds']:g} s, retry wait {settings['retry_wait_seconds']:g} s, "
        f"model/tool timeout {settings['model_timeout_seconds']:g}/"
        f"{settings['tool_timeout_seconds']:g} s, run budget "
        f"{settings['default_max_seconds']:g} s, sweeper every {t['sweep_every_s']:g} s "
        f"(stale {settings['sweep_stale_seconds']:g} s)",
        f"  delivery: push delivery with the production retry policy, backoff "
        f"{t['backoff_s'][0]:g}..{t['backoff_s'][1]:g} s, request timeouts (ack deadlines) "
        f"{_kv(t['request_timeout_s'])} s; {t['max_delivery_attempts']} delivery attempts, "
        f"{t['max_step_attempts']} step attempts",
        f"  not scaled: {'; '.join(t['unscaled'])}",
        "",
        _row("Runs (fault phase / every phase)", f"{f['runs']} / {every['runs']}"),
        "Faults injected",
        _row("push deliveries duplicated (sequential/concurrent)",
             f"{d.get('duplicated_sequentially', 0) + d.get('duplicated_concurrently', 0)} "
             f"({d.get('duplicated_sequentially', 0)}/{d.get('duplicated_concurrently', 0)})", 2),
        _row("function answers non-2xx (fault phase)", d.get("non_2xx_answers", 0), 2),
        _row("push delivery: failed pushes / redeliveries / dead-lettered",
             f"{push.get('failed_pushes', 0)} / {push.get('redeliveries', 0)} / "
             f"{push.get('dead_lettered', 0)}", 2),
        _row("SIGKILL + restart, by point", _kv(faults["kills"]), 2),
        _row("model faults (bursts)", f"{_kv(faults['model'])} ({faults['model_bursts']} bursts)",
             2),
        _row("tool API faults", f"weather.gov 500 {faults['tool']['nws_500']}, ip-api timeout "
             f"{faults['tool']['ipapi_timeouts']}", 2),
        _row("poison messages (published/posted to endpoints)",
             f"{faults['poison']['published']}/{faults['poison']['posted_to_endpoints']}", 2),
        "Outcome (fault phase)",
        _row("completed with an answer", out["completed"]
             - sum(out["completed_without_answer"].values()), 2),
        _row("completed without an answer (stop reason)", _kv(out["completed_without_answer"]),
             2),
        _row("failed with reason", f"{out['failed']} ({_kv(out['failed_reasons'])})", 2),
        _row("stopped by their (scaled) time budget / slowed by a kill, retry or fault",
             f"{out.get('ended_by_budget', 0)} / {out.get('ended_by_budget_slowed', 0)}", 2),
        _row("ended by a crash or a duplicate", out["ended_by_crash_or_duplicate"], 2),
        _row("stuck (not finished in the bounded wait)", out["stuck"], 2),
        _row("lost (no run, or no answer message)", out["lost"], 2),
        "Every phase (fault, follow-up, storm, dead letter)",
        _row("lost / stuck", f"{every['lost']} / {every['stuck']}", 2),
        _row("transcript overwrites / order problems",
             f"{every['transcript_overwrites']} / {every['conversation_order_problems']} in "
             f"{every['conversations']} conversations ({every['conversations_with_follow_ups']} "
             "with follow-ups)", 2),
        _row("sweeper passes / actions", f"{f['sweeper']['passes']} / "
             f"{_kv(f['sweeper']['actions'])}", 2),
        "Checks (fault phase)",
        _row("answers equal to the fault-free run's",
             f"{checks['answers_equal_fault_free']}/{checks['answers_compared']}", 2),
        _row("history complete and in order", f"{checks['history_ok']}/{f['runs']}", 2),
        _row("duplicate recorded steps / gaps",
             f"{checks['duplicate_recorded_steps']} / {checks['history_gaps']}", 2),
        _row("duplicate executions (model/tool)", f"{dups['model'] + dups['tool']} "
             f"({dups['model']}/{dups['tool']}); outside kills {dups['outside_kills']}; "
             f"extra calls of unclaimed steps under duplicated pushes (recorded once) "
             f"{dups.get('overlapping_unclaimed_calls', 0)}", 2),
        _row("model steps the engine published again (not the front's copies)",
             dups.get("model_steps_published_again", "-"), 2),
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
    lines += _scenarios(f)
    lines += ["Recovery after a SIGKILL (kill -> run complete)",
              _row(f"ackloop, measured (lease {f['lease_seconds']:g} s)", _dist(rec["ackloop"]),
                   2),
              _row("ackloop, measured / factor (an upper bound: the machine's own time, "
                   "restarts included, is not scaled)",
                   _dist(rec["ackloop_production_equivalent"]), 2),
              _row("  of which process restart (not scaled)", _dist(rec["restart_s"]), 2)]
    for mode, label in (("seed", "Temporal, seed settings"), ("tuned", "Temporal, tuned")):
        found = rec["temporal"].get(mode)
        if found:
            lines.append(_row(f"{label} ({_settings(found['settings'])})",
                              f"p50 {found['p50']:>6} s   p95 {found['p95']:>6} s   "
                              f"(n={found['runs']}, in-flight executions "
                              f"{found['in_flight_executions']})", 2))
    if rec.get("temporal_skipped"):
        lines.append(_row("Temporal", f"SKIPPED: {rec['temporal_skipped']}", 2))
    elif t["factor"] != 1:
        lines.append("  (Temporal runs at production time: no verdict against it unless "
                     "--time-scale 1)")
    lines.append("Targets")
    lines += [_row(x["name"], f"{'MET' if x['met'] else 'NOT MET'}  ({x['detail']})", 2)
              for x in f["targets"]]
    if out.get("timelines"):
        lines.append("Fault-phase runs ended without an answer, not by an injected malformed "
                     "answer (first 20)")
        lines += [f"  {t}" for t in out["timelines"]]
    if f["problems"]:
        lines.append("Problems (first 30)")
        lines += [f"  {p}" for p in f["problems"]]
    return "\n".join(lines)


def _scenarios(f: dict[str, Any]) -> list[str]:
    fu, storm, dl = f["followup"], f["storm"], f["dead_letter"]
    lines = [
        "Follow-up during a long run",
        _row("asked / transcript order", f"{fu.get('runs')} / {fu.get('transcript_order')}", 2),
        _row("queued on arrival / saw the earlier turns",
             f"{fu.get('queued_on_arrival')} / {fu.get('history_seen')}", 2),
        _row("history lengths carried / expected", f"{fu.get('history_lengths')}", 2),
        _row("status / answer ok / ends published",
             f"{fu.get('statuses')} / {fu.get('answers_ok')} / {fu.get('ends_published')}", 2),
        *_children(f.get("children", {})),
        *_sleeps(f.get("sleeps", {"skipped": "not run"})),
        f"Gemini 429 storm ({storm.get('storm_s')} s, retry-after {storm.get('retry_after_s')} s)",
        _row("runs asked during it, by outcome", f"{storm.get('runs')}: "
             f"{_kv(storm.get('outcomes', {}))}", 2),
        _row("failed by the retries / implied by the retry bound",
             f"{storm.get('failed')} / {storm.get('failures_implied')} "
             f"(storm < bound {storm.get('bound_s')} s)", 2),
        _row("failed (reasons; a budget end included)",
             f"{_kv(storm.get('failed_reasons', {})) or 0}; ended by their budget "
             f"{storm.get('ended_by_budget', 0)}", 2),
        _row("answers equal the fault-free run's", f"{storm.get('answers_ok')}/"
             f"{storm.get('answered')}", 2),
        _row("most claims of one step / 429s served",
             f"{storm.get('max_step_claims')} / {storm.get('model_429s')}", 2),
        _row("last run ended after the storm", f"{storm.get('finished_after_storm_s')} s", 2),
    ]
    if "skipped" in dl:
        return [*lines, _row("Dead-letter path", f"SKIPPED: {dl['skipped']}")]
    lines.append(f"Dead-letter path (shipped policy: {dl['max_delivery_attempts']} deliveries, "
                 f"at least {dl['expected_after_s']} s of backoff)")
    for ref, run in dl.get("runs", {}).items():
        letter = run.get("dead_letter") or {}
        lines.append(_row(
            f"{ref}: {DEAD_LETTER_RUNS.get(ref, '')}",
            f"{run.get('status')}/{run.get('stop_reason')} after {run.get('seconds_to_end')} s, "
            f"{run.get('step_claims')} claims"
            + (f", dead letter {letter.get('verdict')} after {letter.get('delivery_attempts')} "
               "deliveries" if letter else ", no dead letter")
            + f"; ends {run.get('ends_published')}"
            + (f"; redrive {run.get('redriven')} -> {run.get('after_redrive')}"
               if run.get("redriven") else ""), 2))
    lines.append(_row("dla redriven: answer / transcript / model answers per turn / 2nd redrive",
                      f"{dl.get('answer_ok')} / {dl.get('transcript_ok')} / "
                      f"{dl.get('model_answers_per_turn')} / "
                      f"{dl.get('second_redrive') or 'nothing to do'}", 2))
    return lines


def _sleeps(sl: dict[str, Any]) -> list[str]:
    if "skipped" in sl:
        return [_row("Calls that sleep (follow-up)", f"SKIPPED: {sl['skipped']}")]
    return [
        "Calls that sleep (follow-up; killed while they slept: "
        f"{', '.join(sl.get('killed') or [])})",
        _row("runs / completed / answered with their own order / woken by the clock",
             f"{sl.get('runs')} / {sl.get('completed')} / {sl.get('answers_ok')} / "
             f"{sl.get('woken_by_clock')}", 2),
        _row("woke before their time / stuck", f"{sl.get('woke_early')} / {sl.get('stuck')}", 2),
        _row("lateness after their time (median / p99 / max)",
             " / ".join(f"{sl.get('lateness_s', {}).get(k)} s" for k in ("median", "p99", "max")),
             2),
        _row("schedule: firings / ticks missed / runs doubled / runs completed",
             f"{sl.get('firings')} / {sl.get('ticks_missed')} / {sl.get('runs_doubled')} / "
             f"{sl.get('scheduled_runs_completed')}", 2),
        _row("tick lateness (median / p99 / max)",
             " / ".join(f"{sl.get('tick_lateness_s', {}).get(k)} s"
                        for k in ("median", "p99", "max")), 2),
    ]


def _children(ch: dict[str, Any]) -> list[str]:
    if "skipped" in ch:
        return [_row("Child runs (research-team)", f"SKIPPED: {ch['skipped']}")]
    return [
        f"Child runs (research-team trees, one kill per wave at {ch.get('waves')})",
        _row("trees / answered as fault-free / handed to the writer",
             f"{ch.get('trees')} / {ch.get('answers_ok')} / {ch.get('handed_off')}", 2),
        _row("children found / completed / calls without exactly one child / stray",
             f"{ch.get('children')} / {ch.get('children_completed')} / "
             f"{len(ch.get('calls_without_one_child') or [])} / {ch.get('stray_children')}", 2),
        _row("kills fired / not fired / unexpected exits",
             f"{ch.get('kills')} / {ch.get('kills_not_fired')} / "
             f"{ch.get('unexpected_exits')}", 2),
        _row("duplicate recorded steps / model calls made again / stuck / ends unpublished",
             f"{ch.get('duplicate_recorded_steps')} / {ch.get('repeated_model_calls')} / "
             f"{ch.get('stuck')} / {ch.get('ends_unpublished')}", 2),
        _row("model steps the engine published again (not the front's copies)",
             ch.get("model_steps_published_again"), 2),
        _row("wall time", f"{ch.get('wall_s')} s; "
             f"{'; '.join(ch.get('problems') or []) or 'no problem'}", 2),
    ]


DEAD_LETTER_RUNS = {
    "dla": "429 quota, budget > dead letter",
    "dlb": "429 quota, shipped budget",
    "dlc": "500 on every call",
}


def _settings(s: dict[str, Any]) -> str:
    hb = s.get("heartbeat_timeout_s")
    return (f"start-to-close {s.get('tool_start_to_close_s'):g} s"
            + (f", heartbeat {hb:g} s" if hb else ", no heartbeat"))
