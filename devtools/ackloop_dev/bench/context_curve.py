"""What each turn of a long conversation costs, with and without the default context policy.

One conversation of ``--turns`` runs (a question, a document lookup whose result is
``--result-words`` words, an answer: two model calls and a tool call each), run twice on the
in-process engine over a counting in-memory Firestore, with the real google-genai client
against the fake Gemini server (its token counts, implicit cache and input limit are
Gemini's shape, counted in words): once under ``Context()`` (the default policy), once under
``Context.unbounded()``. Per turn it records the input tokens sent (compaction's included), the
cached ones, the run's cost in USD (list prices), the Firestore documents it read and the CPU
of the engine's thread. It prints every ``--every``-th turn and the totals, and writes a JSON
and a chart (PNG).

    python -m ackloop_dev.bench.context_curve --turns 200 --out bench-results/context_curve.png

Also measured: what one compaction adds (the summary's call, the reads, writes and bytes of
its commit), from the runs that compacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import SystemClock
from ackloop.domain.context_window import Context, is_summary_request
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import FunctionCall, QueryMessage
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.gemini import GeminiModel
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools.base import ToolContext, ToolOutcome
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

CONVERSATION = "long-conversation"


def policy(request: ModelRequest) -> ModelTurn:
    """A question gets a lookup; a lookup's result gets the answer. Stateless, so it plays
    the same before and after a compaction."""
    last = request.contents[-1]
    if not any("function_response" in p for p in last.get("parts", [])):
        question = last["parts"][0]["text"]
        return calls_turn([("search_documents", {"query": question})], request=request)
    return text_turn("Here is what the documents say about it.", request=request)


class Documents:
    """One tool whose result is ``words`` words, different for each query."""

    def __init__(self, words: int) -> None:
        self.words = words

    def declarations(self) -> list[dict[str, Any]]:
        return [{"name": "search_documents", "description": "Search the documents.",
                 "parameters": {"type": "object",
                                "properties": {"query": {"type": "string"}}}}]

    def is_retry_safe(self, name: str) -> bool:
        return True

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        seed = str(call.args.get("query", ""))
        text = " ".join(f"{seed.split()[-1]}-w{i}" for i in range(self.words))
        return ToolOutcome(response={"result": text})


@dataclass
class Turn:
    turn: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    usd: float
    docs_read: int
    docs_written: int
    cpu_ms: float
    compacted: bool


@dataclass
class Series:
    name: str
    turns: list[Turn] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0

    def total(self, name: str) -> float:
        return float(sum(getattr(t, name) for t in self.turns))


async def run_series(name: str, context: Context, turns: int, result_words: int,
                     server: FakeGeminiServer) -> Series:
    db = CountingDocumentDB(MemoryDocumentDB())
    publisher = MemoryPublisher()
    agent = Agent("default", "Answer from the documents.", Documents(result_words),
                  context=context)
    deps = Deps(settings=Settings(), store=AgentStore(db, f"c{uuid.uuid4().hex[:8]}_"),
                publisher=publisher,
                model=GeminiModel(api_key="bench", base_url=server.url, timeout_seconds=60.0),
                agents=AgentRegistry([agent]), clock=SystemClock(), owner="bench")
    loop = InProcessLoop(deps, publisher)
    series = Series(name)
    started = time.monotonic()
    for i in range(turns):
        request_id = f"{name.replace(' ', '-')}-{i}"
        cpu = time.thread_time()
        await loop.submit(QueryMessage(request_id=request_id, text=f"question {i}",
                                       conversation_id=CONVERSATION))
        await loop.run_until_idle()
        cpu_ms = (time.thread_time() - cpu) * 1000
        run = await deps.store.runs.get_run(run_id_for_request(request_id))
        if run is None or run.cost is None or run.answer is None:
            raise RuntimeError(f"{name}: turn {i} did not answer ({run})")
        steps = await deps.store.steps.list_steps(run.run_id)
        made = [s.result["compaction"] for s in steps
                if s.kind == "model" and s.result and "compaction" in s.result]
        series.compactions += [{"turn": i, **m} for m in made]
        series.turns.append(Turn(
            turn=i + 1, input_tokens=run.cost.prompt_tokens, cached_tokens=run.cost.cached_tokens,
            output_tokens=run.cost.output_tokens, usd=run.cost.usd,
            docs_read=run.cost.firestore_reads, docs_written=run.cost.firestore_writes,
            cpu_ms=round(cpu_ms, 3), compacted=bool(made)))
    series.wall_seconds = round(time.monotonic() - started, 2)
    return series


def compaction_cost(series: Series, server: FakeGeminiServer) -> dict[str, Any]:
    """What a compaction adds, from the turns that compacted against their neighbours."""
    if not series.compactions:
        return {}
    compacted = [t for t in series.turns if t.compacted]
    plain = [t for t in series.turns if not t.compacted and t.turn > 1]

    def mean(values: Sequence[float]) -> float:
        return round(sum(values) / len(values), 3) if values else 0.0

    summaries = [r for r in server.requests if is_summary_request(r.body.get("contents", []))]
    return {
        "compactions": len(series.compactions),
        "summary_input_tokens_mean": mean([c["usage"]["prompt_tokens"]
                                           for c in series.compactions]),
        "summary_output_tokens_mean": mean([c["usage"]["output_tokens"]
                                            for c in series.compactions]),
        "summary_bytes_mean": mean([c["summary_bytes"] for c in series.compactions]),
        "kept_bytes_mean": mean([c.get("kept_bytes", 0) for c in series.compactions]),
        "docs_read_per_turn": {"compacting": mean([t.docs_read for t in compacted]),
                               "other": mean([t.docs_read for t in plain])},
        "docs_written_per_turn": {"compacting": mean([t.docs_written for t in compacted]),
                                  "other": mean([t.docs_written for t in plain])},
        "summary_requests_seen": len(summaries),
        "usd_per_turn": turn_cost_ratio(series),
    }


def turn_cost_ratio(series: Series) -> dict[str, float]:
    """What a compacting turn cost against the ordinary turn just before it (means, and their
    ratio): the summary's call is the difference, less what Gemini's cache served of it."""
    before = {t.turn: t for t in series.turns}
    pairs = [(t.usd, before[t.turn - 1].usd) for t in series.turns
             if t.compacted and t.turn - 1 in before and not before[t.turn - 1].compacted]
    if not pairs:
        return {}
    compacting = sum(c for c, _ in pairs) / len(pairs)
    ordinary = sum(o for _, o in pairs) / len(pairs)
    return {"compacting": round(compacting, 6), "ordinary_before": round(ordinary, 6),
            "ratio": round(compacting / ordinary, 2) if ordinary else 0.0}


def draw(series: list[Series], path: Path, result_words: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    panels = [("input_tokens", "input tokens sent"), ("usd", "cost of the turn, USD"),
              ("docs_read", "Firestore documents read"), ("cpu_ms", "engine CPU, ms")]
    for ax, (name, label) in zip(axes.flat, panels, strict=True):
        for s, style in zip(series, ("-", "--"), strict=False):
            ax.plot([t.turn for t in s.turns], [getattr(t, name) for t in s.turns],
                    label=s.name, linestyle=style, linewidth=1.2)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("turn of the conversation (one question, a lookup, an answer)")
    axes[0][0].legend()
    fig.suptitle(f"Per turn of one conversation: a tool result of {result_words} words a "
                 "turn; fake Gemini (tokens counted in words)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(series: list[Series], every: int) -> str:
    lines = []
    for s in series:
        lines.append(f"\n{s.name}: {len(s.turns)} turns, {len(s.compactions)} compaction(s), "
                     f"{s.wall_seconds} s")
        lines.append("  turn  input_tokens  cached  usd        docs_read  docs_written  cpu_ms")
        for t in s.turns:
            if t.turn == 1 or t.turn % every == 0 or t.compacted:
                lines.append(f"  {t.turn:4d}  {t.input_tokens:12d}  {t.cached_tokens:6d}  "
                             f"{t.usd:.6f}  {t.docs_read:9d}  {t.docs_written:12d}  "
                             f"{t.cpu_ms:6.1f}{'  compacted' if t.compacted else ''}")
        lines.append(f"  total input tokens {int(s.total('input_tokens'))}, cached "
                     f"{int(s.total('cached_tokens'))}, cost ${s.total('usd'):.4f}, docs read "
                     f"{int(s.total('docs_read'))}, cpu {s.total('cpu_ms') / 1000:.2f} s")
    if len(series) == 2:
        a, b = series
        for name in ("input_tokens", "usd", "docs_read", "cpu_ms"):
            last_a = sum(getattr(t, name) for t in a.turns[-10:])
            last_b = sum(getattr(t, name) for t in b.turns[-10:])
            lines.append(f"ratio {b.name} / {a.name}, {name}: whole conversation "
                         f"{b.total(name) / max(a.total(name), 1e-9):.2f}, last 10 turns "
                         f"{last_b / max(last_a, 1e-9):.2f}")
    return "\n".join(lines)


async def bench(turns: int, result_words: int) -> tuple[list[Series], dict[str, Any]]:
    series = []
    cost: dict[str, Any] = {}
    for name, context in (("default policy", Context()), ("no policy", Context.unbounded())):
        with FakeGeminiServer(ScriptedModel(policy).decide) as server:
            s = await run_series(name, context, turns, result_words, server)
            if s.compactions:
                cost = compaction_cost(s, server)
        series.append(s)
    return series, cost


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--result-words", type=int, default=600,
                        help="words of each lookup's result (default 600: the default policy's "
                             "64,000-token budget is reached after about 100 turns)")
    parser.add_argument("--every", type=int, default=20, help="print every n-th turn")
    parser.add_argument("--out", type=Path, default=Path("bench-results/context_curve.png"))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    series, cost = asyncio.run(bench(args.turns, args.result_words))
    print(report(series, args.every))
    print("\nwhat a compaction adds:", json.dumps(cost, indent=2))
    print(f"chart: {draw(series, args.out, args.result_words)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"series": [asdict(s) for s in series],
                                         "compaction": cost}, indent=1))


if __name__ == "__main__":
    main()
