"""An eval's report for people and for CI: a terminal table, Markdown, JUnit XML.

Each shows every case's outcome and, for a case that failed, each failed check with its reason
(a trajectory's diff: ``=`` a call as expected, ``-`` expected and not made, ``+`` made and not
expected, ``!`` a forbidden call), so a failure reads without opening the run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable

from ackloop.domain.eval_reports import CaseResult, EvalReport

ANSWER_CHARS = 300


def _answer(case: CaseResult) -> str:
    import json

    value = case.answer
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = (text or "").replace("\n", " ")
    if not text.strip():
        return "(no answer)"
    return text if len(text) <= ANSWER_CHARS else text[:ANSWER_CHARS] + "…"


def _case_label(case: CaseResult, report: EvalReport) -> str:
    return f"{case.name} [{case.repetition}/{report.repeat}]" if report.repeat > 1 else case.name


def summary_lines(report: EvalReport) -> list[str]:
    s = report.summary
    lines = [f"eval {report.eval_id} ({report.name}, {report.target}): {s.passed} of {s.runs} "
             f"run(s) passed ({s.pass_rate:.0%}), score {s.score:.3f}"]
    if report.repeat > 1:
        lines.append(f"pass@{report.repeat} {s.pass_at_k:.0%}, pass^{report.repeat} "
                     f"{s.pass_all_k:.0%} over {s.cases} case(s)")
    lines.append(f"runs cost ${s.cost_usd:.6f} ({s.model_calls} model call(s), "
                 f"{s.tool_calls} tool call(s)); the eval itself ${s.eval_cost_usd:.6f} "
                 f"({s.judge_calls} judge call(s), {s.eval_firestore_reads} document(s) read, "
                 f"{s.eval_pubsub_bytes} byte(s) published); {s.wall_seconds:.1f} s, the "
                 f"slowest case {s.slowest_case_seconds:.1f} s")
    if s.replayed:
        lines.append(f"{s.replayed} run(s) replayed from their recordings: no model called, "
                     "no tool run, nothing paid")
    if s.errors:
        lines.append(f"{s.errors} run(s) could not be checked")
    return lines


def failure_lines(case: CaseResult) -> list[str]:
    """Why ``case`` failed: its error, or each failed check with its reason, indented."""
    if case.error is not None:
        return [f"  error: {case.error}"]
    lines = []
    for check in case.failures():
        reason = (check.reason or "failed").splitlines() or ["failed"]
        lines.append(f"  {check.name}: {reason[0]}")
        lines += [f"    {line}" for line in reason[1:]]
    lines.append(f"  answer: {_answer(case)}")
    return lines


def terminal(report: EvalReport, *, links: bool = True) -> str:
    """The report as a table with rich, the failures' reasons below it."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report.name}: {report.eval_id}", title_justify="left")
    for column, justify in (("case", "left"), ("result", "left"), ("score", "right"),
                            ("model", "right"), ("tools", "right"), ("time", "right"),
                            ("cost", "right"), ("run", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for case in report.cases:
        result = ("pass" if case.passed else "error" if case.error else "FAIL") + (
            " (replay)" if case.replay else "")
        table.add_row(_case_label(case, report), result, f"{case.score:.2f}",
                      str(case.model_calls), str(case.tool_calls), f"{case.wall_seconds:.1f}s",
                      f"${case.cost_usd:.6f}",
                      (case.link or case.run_id or "-") if links else (case.run_id or "-"))
    out = StringIO()
    console = Console(file=out, width=160, force_terminal=False, no_color=True)
    console.print(table)
    lines = [out.getvalue().rstrip()]
    failed = [c for c in report.cases if not c.passed]
    for case in failed:
        lines.append(f"✗ {_case_label(case, report)} (run {case.run_id or '-'})")
        lines += failure_lines(case)
    lines += summary_lines(report)
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(report: EvalReport) -> str:
    """The report as Markdown: the summary, a table of cases, the failures' details."""
    s = report.summary
    out = [f"# Eval {report.name} ({report.eval_id})", "",
           f"- target: {report.target}; dataset: `{report.dataset or '-'}`",
           f"- **{s.passed} of {s.runs} runs passed** ({s.pass_rate:.0%}), score "
           f"**{s.score:.3f}**"]
    if report.repeat > 1:
        out.append(f"- pass@{report.repeat}: {s.pass_at_k:.0%}, pass^{report.repeat}: "
                   f"{s.pass_all_k:.0%} ({s.cases} cases, {report.repeat} runs each)")
    out += [f"- cost of the runs: ${s.cost_usd:.6f} ({s.model_calls} model calls, "
            f"{s.tool_calls} tool calls); the eval's own: ${s.eval_cost_usd:.6f}",
            f"- time: {s.wall_seconds:.1f} s (slowest case {s.slowest_case_seconds:.1f} s)",
            "", "| case | result | score | model calls | tool calls | time | cost | run |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    for case in report.cases:
        run = (f"[{case.run_id}]({case.link})" if case.link and case.run_id
               else case.run_id or "-")
        result = "✅ pass" if case.passed else "⚠️ error" if case.error else "❌ fail"
        out.append(f"| {_md(_case_label(case, report))} | {result} | {case.score:.2f} | "
                   f"{case.model_calls} | {case.tool_calls} | {case.wall_seconds:.1f} s | "
                   f"${case.cost_usd:.6f} | {run} |")
    failed = [c for c in report.cases if not c.passed]
    if failed:
        out += ["", "## Failures"]
        for case in failed:
            out += ["", f"### {_md(_case_label(case, report))}", "", "```diff",
                    *failure_lines(case), "```"]
    return "\n".join(out) + "\n"


def junit(report: EvalReport) -> str:
    """The report as JUnit XML: one test case per case and repetition, a failed check a
    ``failure`` (its reasons in the text), a case that could not be checked an ``error``."""
    s = report.summary
    suite = ET.Element("testsuite", {
        "name": report.name, "tests": str(s.runs), "failures": str(s.failed),
        "errors": str(s.errors), "skipped": "0", "time": f"{s.wall_seconds:.3f}",
        "timestamp": _iso(report.started_at)})
    properties = ET.SubElement(suite, "properties")
    for name, value in (("eval_id", report.eval_id), ("target", report.target),
                        ("score", f"{s.score:.4f}"), ("pass_rate", f"{s.pass_rate:.4f}"),
                        ("pass_at_k", f"{s.pass_at_k:.4f}"),
                        ("pass_all_k", f"{s.pass_all_k:.4f}"),
                        ("cost_usd", f"{s.cost_usd:.6f}"),
                        ("eval_cost_usd", f"{s.eval_cost_usd:.6f}")):
        ET.SubElement(properties, "property", {"name": name, "value": value})
    for case in report.cases:
        element = ET.SubElement(suite, "testcase", {
            "classname": f"{report.name}.{case.agent or 'agent'}",
            "name": _case_label(case, report), "time": f"{case.wall_seconds:.3f}"})
        if case.error is not None:
            ET.SubElement(element, "error", {"message": case.error[:500]}).text = case.error
        elif not case.passed:
            names = ", ".join(c.name for c in case.failures())
            ET.SubElement(element, "failure", {"message": f"failed: {names}"}).text = "\n".join(
                failure_lines(case))
        out = _lines([f"run: {case.run_id or '-'}", f"link: {case.link or '-'}",
                      f"score: {case.score:.3f}", f"cost_usd: {case.cost_usd:.6f}",
                      *(f"call: {t}" for t in case.trajectory)])
        ET.SubElement(element, "system-out").text = out
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode")


def _lines(lines: Iterable[str]) -> str:
    return "\n".join(lines)


def _iso(timestamp: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S")
