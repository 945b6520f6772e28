"""The side-by-side table of ``ackloop bench`` (Markdown, so docs/how-to/benchmark.md can hold it
as is)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ackloop_dev.bench.targets import OVERHEAD_RATIO_LIMIT

Figures = dict[str, Any]
Cell = Callable[[Figures], str]


def _pair(dist: dict[str, float] | None) -> str:
    if not dist or not dist.get("n", 1):
        return "-"
    return f"{dist['p50']:.0f} / {dist['p95']:.0f}"


def _level(figures: Figures, concurrency: int) -> Figures | None:
    return next((p for p in figures.get("concurrent", []) if p["concurrency"] == concurrency),
                None)


def _at(concurrency: int, cell: Callable[[Figures], str]) -> Cell:
    def read(figures: Figures) -> str:
        phase = _level(figures, concurrency)
        return cell(phase) if phase is not None else "-"

    return read


def _cpu(phase: Figures) -> str:
    per_run = phase["cpu_ms_per_run"]
    other = per_run.get("other")
    text = f"{per_run['total']:.0f}"
    return text + (f" (+{other:.0f} other)" if other is not None else "")


def _rss(figures: Figures) -> str:
    if "peak_rss_mb" in figures:  # Temporal: one process per role
        rss = figures["peak_rss_mb"]
        return " / ".join(f"{k} {v:.0f}" for k, v in rss.items())
    rss = figures.get("peak_rss_mib") or {}
    return " / ".join(f"{k.removesuffix('_step')} {v['tree']:.0f}" for k, v in rss.items())


def _cold(figures: Figures) -> str:
    if "cold_start_s" in figures:
        return f"{figures['cold_start_s']:.2f}"
    if "cold_start" not in figures:
        return "-"
    cold = figures["cold_start"]
    text = f"{cold['worst_median_s']:.2f} (max {cold['max_s']:.2f}"
    if "cpu_s_median" in cold:
        text += (f"; {cold['cpu_s_median']:.2f} s CPU; machine "
                 f"{cold['machine_busy_cores']} cores busy")
    return text + ")"


ROWS: list[tuple[str, Cell]] = [
    ("per-step overhead p50 / p95 ms", lambda f: _pair(f["sequential"]["step_overhead_ms"])),
    ("run end-to-end, sequential, p50 / p95 ms", lambda f: _pair(f["sequential"]["e2e_ms"])),
    ("CPU ms per run, sequential (+ other load on the machine)",
     lambda f: _cpu(f["sequential"])),
]
for _c in (50, 200):
    ROWS += [
        (f"runs/s at {_c} concurrent", _at(_c, lambda p: f"{p['runs_per_s']:.2f}")),
        (f"end-to-end p50 / p95 ms at {_c}", _at(_c, lambda p: _pair(p["e2e_ms"]))),
        (f"CPU ms per run at {_c} (+ other)", _at(_c, _cpu)),
    ]
ROWS += [
    ("peak RSS MiB per process", _rss),
    ("cold start s (spawn -> first request; median)", _cold),
]


def engine_columns(result: Figures) -> dict[str, Figures]:
    """Each engine's figures by its column's name: ackloop (and its emulator-push phases),
    each Temporal storage, DBOS, Restate; only those the result holds."""
    columns: dict[str, Figures] = {}
    ack = result.get("ackloop")
    if ack:
        columns["ackloop (push delivery)"] = ack
        if ack.get("emulator_push"):
            columns["ackloop (emulator push)"] = ack["emulator_push"]
    temporal = result.get("temporal") or {}
    for storage, figures in (temporal.get("storages") or {}).items():
        columns[f"Temporal ({storage})"] = figures
    if dbos := result.get("dbos"):
        columns[f"DBOS (PostgreSQL {dbos.get('postgres', '')})".replace(" )", ")")] = dbos
    if restate := result.get("restate"):
        columns["Restate (single node)"] = restate
    return columns


def _safe(cell: Cell, figures: Figures) -> str:
    try:
        return cell(figures)
    except (KeyError, TypeError, ValueError):
        return "-"


def main_table(result: Figures) -> str:
    """Both engines side by side."""
    columns = engine_columns(result)
    lines = ["| figure | " + " | ".join(columns) + " |",
             "|---|" + "---|" * len(columns)]
    for label, cell in ROWS:
        lines.append(f"| {label} | " + " | ".join(_safe(cell, f) for f in columns.values()) + " |")
    return "\n".join(lines)


def counts_table(ack: Figures) -> str:
    """ackloop's counted operations per step and the cost per 1,000 runs."""
    per_step = ack["sequential"]["per_step"]
    cost = ack["sequential"]["cost_per_1000_runs"]
    lines = [
        "| ackloop, per step (counted by the functions; pushes by the push delivery) | value |",
        "|---|---|",
        f"| Firestore requests (round trips + 2 per transaction) | {per_step['requests']:.2f} |",
        f"| Firestore documents read | {per_step['docs_read']:.2f} |",
        f"| Firestore documents written | {per_step['docs_written']:.2f} |",
        f"| Firestore transactions | {per_step['transactions']:.2f} |",
        f"| Firestore bytes read | {per_step['bytes_read']:.0f} |",
        f"| Pub/Sub publishes | {per_step['published']:.2f} |",
        f"| push deliveries (non-2xx), as the push delivery saw them answered | "
        f"{per_step['deliveries']:.2f} ({per_step['redelivered']:.2f}) |",
        f"| cost per 1,000 runs, USD (list prices of {cost['prices_date']}) | "
        f"{cost['total_usd']:.4f} (Firestore {cost['firestore_usd']:.4f}, Pub/Sub "
        f"{cost['pubsub_usd']:.4f}, Cloud Run requests {cost['cloud_run_requests_usd']:.4f} + "
        f"CPU {cost['cloud_run_cpu_usd']:.4f}) |",
    ]
    return "\n".join(lines)


def headline(result: Figures) -> str:
    """The two figures the issue tracks: the overhead ratio against Temporal, and the non-2xx
    push answers per 1,000 steps."""
    ack = result.get("ackloop") or {}
    lines = []
    sqlite = ((result.get("temporal") or {}).get("storages") or {}).get("sqlite")
    if ack.get("sequential") and sqlite:
        ours = ack["sequential"]["step_overhead_ms"]
        theirs = sqlite["sequential"]["step_overhead_ms"]
        ratio = ours["p50"] / theirs["p50"] if theirs["p50"] else float("nan")
        lines.append(
            f"- per-step overhead p50 / p95: ackloop {ours['p50']:.1f} / {ours['p95']:.1f} ms, "
            f"Temporal (SQLite) {theirs['p50']:.1f} / {theirs['p95']:.1f} ms; "
            f"ratio of the p50s **{ratio:.2f}** (target <= {OVERHEAD_RATIO_LIMIT})")
    split = (ack.get("sequential") or {}).get("step_overhead_split_ms")
    if split:
        lines.append(
            f"- ackloop's step overhead, p50 of each part: {split['to_claim']['p50']:.1f} ms from "
            f"a call's end to the next step's claim (commit, publish, Pub/Sub delivery), "
            f"{split['claim_to_call']['p50']:.1f} ms from the claim to the call (claim, reads)")
    answered = ack.get("push_answers") or {}
    if answered.get("steps"):
        statuses = ", ".join(f"{k}: {n}" for k, n in answered["by_status"].items()) or "none"
        lines.append(
            f"- non-2xx push answers per 1,000 steps (push delivery's /_stats, fault-free "
            f"phases): **{answered['non_2xx_per_1000_steps']:g}** ({answered['non_2xx']} of "
            f"{answered['pushes']} pushes over {answered['steps']} steps; by answer: "
            f"{statuses})")
    return "\n".join(lines)


def growth_table(ack: Figures) -> str:
    """Per-step figures for runs of growing length."""
    growth = ack.get("growth") or {}
    lines = ["| steps per run | overhead p50 ms | requests/step | docs read/step | "
             "bytes read/step |", "|---|---|---|---|---|"]
    for row in growth.get("rows", []):
        s = row["per_step"]
        lines.append(f"| {row['steps_per_run']} | {row['step_overhead_ms']['p50']:.0f} | "
                     f"{s['requests']:.2f} | {s['docs_read']:.2f} | {s['bytes_read']:.0f} |")
    return "\n".join(lines)


def targets_table(targets: list[Figures]) -> str:
    """Each target, its measured value and ratio, and whether it holds."""
    lines = ["| target | measured | bound | ratio | holds |", "|---|---|---|---|---|"]
    for t in targets:
        ratio = "-" if t["ratio"] is None else f"{t['ratio']:.2f}"
        lines.append(f"| {t['name']} | {t['measured']} | {t['bound']} | {ratio} | "
                     f"{'yes' if t['holds'] else 'NO'} |")
    return "\n".join(lines)


def floors_text(ack: Figures) -> str:
    """The emulators' floors, as measured in this run."""
    floor = ack.get("delivery_floor") or {}
    lock = ack.get("lock_floor") or {}
    parts = []
    if floor:
        parts.append(
            "Pub/Sub emulator, publish -> delivery on an idle subscription (p50, ms): push "
            f"{floor['emulator_push_ms']['p50']}, streaming pull "
            f"{floor['streaming_pull_ms']['p50']}, unary pull {floor['unary_pull_ms']['p50']} "
            "(publish call alone "
            f"{floor['publish_call_ms']['p50']})."
        )
    if lock:
        parts.append(
            f"Firestore emulator lock floor: {lock['transactions']} concurrent transactions on one "
            f"document took {lock['one_document_s']} s, on distinct documents "
            f"{lock['distinct_documents_s']} s (x{lock['slowdown']})."
        )
    return "\n".join(parts)


def render(result: Figures) -> str:
    """The whole report as Markdown."""
    meta = result.get("meta", {})
    sections = [
        f"ackloop bench, {meta.get('date', '?')} on {meta.get('machine', '?')}; "
        f"command: `{meta.get('command', '?')}`",
        headline(result),
        main_table(result),
        "\n".join(f"{peer}: not measured ({reason})"
                  for peer, reason in (meta.get("skipped") or {}).items()),
        "\n".join(f"{section}: FAILED ({reason})"
                  for section, reason in (meta.get("failed") or {}).items()),
    ]
    ack = result.get("ackloop")
    if ack:
        sections += [counts_table(ack), growth_table(ack), floors_text(ack)]
    if result.get("cold_query"):
        sections.append(cold_text(result["cold_query"]))
    if result.get("targets"):
        sections.append(targets_table(result["targets"]))
    return "\n\n".join(s for s in sections if s)


def cold_text(cold: Figures) -> str:
    """A cold question against a warm one, per deployment layout
    (:mod:`ackloop_dev.bench.cold_query`)."""
    from ackloop_dev.bench.cold_query import table

    return (f"Cold question (every service scaled to zero) vs warm, model: {cold['model']}\n"
            f"```\n{table(cold)}\n```")
