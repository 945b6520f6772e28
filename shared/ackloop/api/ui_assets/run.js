// One run's page (#/runs/<run_id>): status, the calls waiting for a decision, the text being
// written, answer, the question's files, cost, timeline of its steps (with the child runs its
// sub-agents' calls started, each under its step), transcript and trace; a child run links to
// its parent.

import { fileView, questionFiles, responseFiles, storedFiles } from "./files.js";
import { keepRefreshed, liveText, renderApprovals, waitingFor } from "./live.js";
import { filters } from "./runs.js";
import {
  TERMINAL, api, attempt, dollars, h, headers, main, plural, reconcile, secs, statusBadge, when,
} from "./ui.js";

export function runView(runId) {
  const section = h("section", { id: "run", "aria-labelledby": "run-title" });
  const controller = new AbortController();
  let traceShown = false;
  let transcriptKey = "";
  main.replaceChildren(h("p", {}, h("a", { href: "#/" }, "← All runs")), section);

  const parts = {
    parent: h("p", { id: "parent-run", hidden: true }),
    status: h("p", { id: "run-status" }),
    error: h("p", { id: "run-error", class: "error", hidden: true }),
    cancel: h("button", { id: "cancel", type: "button", disabled: true }, "Cancel run"),
    facts: h("dl", { class: "facts" }),
    files: h("div", { id: "question-files", class: "files", hidden: true }),
    approvals: h("section", { id: "approvals", class: "approvals",
      "aria-labelledby": "approvals-title", hidden: true },
    h("h2", { id: "approvals-title", class: "approvals-title" }, "Waiting for your decision")),
    liveLabel: h("p", { id: "live-label", class: "hint", hidden: true }),
    liveText: h("div", { id: "live-text", "aria-live": "polite",
      "aria-labelledby": "live-label" }),
    answer: h("div", { id: "answer" }),
    cost: h("div", { id: "cost" }),
    timeline: h("div", { id: "timeline" }),
    transcript: h("ol", { id: "transcript" }),
    trace: h("div", { id: "trace", hidden: true }),
  };
  parts.cancel.addEventListener("click", async () => {
    parts.cancel.disabled = true;
    await attempt(() => api(`/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" }));
    await attempt(refresh);
  });
  section.append(
    h("h1", { id: "run-title" }, "Run ", h("code", {}, runId)), parts.parent,
    h("div", { class: "run-head" }, parts.status, parts.cancel), parts.error, parts.facts,
    parts.files, parts.approvals,
    h("h2", {}, "Answer"), parts.liveLabel, parts.liveText, parts.answer,
    h("h2", {}, "Cost"), parts.cost,
    h("h2", {}, "Timeline"), parts.timeline,
    h("h2", {}, "Transcript"), parts.transcript,
    parts.trace);

  const live = liveText(parts.liveLabel, parts.liveText);

  async function refresh() {
    const run = await api(`/runs/${encodeURIComponent(runId)}`, { signal: controller.signal });
    renderRun(run, parts);
    renderApprovals(runId, run, parts.approvals, () => attempt(refresh));
    const key = `${run.status}:${run.steps.filter((s) => s.status === "completed").length}`;
    if (key !== transcriptKey) {
      transcriptKey = key;
      const transcript = await api(`/runs/${encodeURIComponent(runId)}/transcript`,
        { signal: controller.signal });
      renderTranscript(transcript, run, parts.transcript);
    }
    // Only now, with the committed turn in the transcript, does its live text go.
    live.committed(run);
    if (TERMINAL.has(run.status) && !traceShown) {
      traceShown = true;
      await showTrace(runId, parts.trace, controller.signal);
    }
    return run;
  }

  const stop = keepRefreshed(runId, refresh, (delta) => live.add(delta), controller.signal);
  return () => { stop(); controller.abort(); };
}

function renderRun(run, parts) {
  const section = document.getElementById("run");
  section.dataset.status = run.status;
  const stop = run.budget_stop ? `stopped by ${run.budget_stop}` : run.stop_reason;
  parts.status.replaceChildren(statusBadge(run.status), " ",
    stop && stop !== run.status ? `${run.status} · ${stop}` : run.status,
    run.cancel_requested && !TERMINAL.has(run.status) ? " · cancel requested" : "",
    waitingFor(run));
  parts.error.hidden = !run.error;
  parts.error.textContent = run.error ? `Failed: ${run.error}` : "";
  parts.cancel.disabled = TERMINAL.has(run.status) || run.cancel_requested;
  const fact = (name, value) => [h("dt", {}, name), h("dd", {}, value)];
  parts.facts.replaceChildren(
    ...fact("Question", run.text),
    ...fact("Agent", `${run.agent} (${run.model})${run.handed_to ? `; handed to ${run.handed_to}` : ""}`),
    ...fact("Conversation", h("a", { href: "#/", onclick: () => {
      filters.conversation_id = run.conversation_id;
    } }, run.conversation_id)),
    ...fact("Created", when(run.created_at)),
    ...fact("Finished", run.finished_at ? `${when(run.finished_at)} (after ${
      secs(run.finished_at - run.created_at)})` : "not yet"),
    ...fact("Trace id", h("code", { id: "trace-id" }, run.trace_id || "—")));
  parts.answer.textContent = run.answer ?? (run.output ? JSON.stringify(run.output, null, 2)
    : TERMINAL.has(run.status) ? "No answer." : "Not answered yet.");
  renderParent(run, parts.parent);
  renderQuestionFiles(run, parts.files);
  renderCost(run, parts.cost);
  renderTimeline(run, parts.timeline);
}

// The files the question carried: written once (they never change), so a refresh neither
// reloads a thumbnail nor takes the focus from a download link.
function renderQuestionFiles(run, box) {
  const files = questionFiles(run);
  if (!files.length || box.dataset.shown) return;
  box.dataset.shown = "true";
  box.replaceChildren(h("h2", { id: "question-files-title" }, "Files in the question"),
    h("div", { class: "file-list" }, files.map((file) => fileView(run.run_id, file))));
  box.hidden = false;
}

// A child run (a sub-agent's call) links to the run whose call started it; written once, so
// a refresh never takes the focus from the link.
function renderParent(run, box) {
  if (!run.parent_run_id || box.dataset.run === run.parent_run_id) return;
  box.dataset.run = run.parent_run_id;
  box.replaceChildren("Child run of ", h("a", { id: "parent-link",
    href: `#/runs/${encodeURIComponent(run.parent_run_id)}` }, h("code", {}, run.parent_run_id)),
  run.parent_step ? `, started by its step ${run.parent_step}` : "");
  box.hidden = false;
}

function renderCost(run, box) {
  const cost = run.cost;
  const usage = run.usage || {};
  const rows = cost ? [
    ["Total", dollars(cost.usd)],
    ["Gemini", `${dollars(cost.gemini_usd)} · ${cost.prompt_tokens} prompt${
      cost.cached_tokens ? ` (${cost.cached_tokens} from Gemini's cache, ${
        Math.round(100 * cost.cached_tokens / cost.prompt_tokens)}%)` : ""} + ${
      cost.output_tokens} output tokens`],
    ["Firestore", `${dollars(cost.firestore_usd)} · ${cost.firestore_reads} reads, ${
      cost.firestore_writes} writes`],
    ["Pub/Sub", `${dollars(cost.pubsub_usd)} · ${cost.pubsub_bytes} bytes`],
    ["Cloud Run", `${dollars(cost.cloud_run_usd)} · ${secs(cost.request_seconds)} of requests`],
    ["Prices of", cost.price_table],
  ] : [
    ["Tokens", `${usage.prompt_tokens ?? 0} prompt + ${usage.output_tokens ?? 0} output`],
    ["Calls", `${plural(usage.model_calls ?? 0, "model call")}, ${
      plural(usage.tool_calls ?? 0, "tool call")}`],
  ];
  const children = run.children || [];
  if (run.children_cost) {
    // Apart from the total, which counts each child's once its call has completed.
    const used = run.children_usage;
    rows.push(["Child runs", `${dollars(run.children_cost.usd)} · ${
      plural(children.length, "child run")} (their own children included)${
      used ? ` · ${usageText(used)}` : ""}`]);
  }
  if (usage.children) {
    // The run's usage counts its children's: what it used itself, apart.
    const own = Object.fromEntries(["model_calls", "tool_calls", "total_tokens"].map(
      (name) => [name, Math.max(0, (usage[name] ?? 0) - (usage.children[name] ?? 0))]));
    rows.push(["Usage", `${usageText(usage)}: its own ${usageText(own)}, its child runs' ${
      usageText(usage.children)}`]);
  }
  box.replaceChildren(h("table", { class: "cost" }, h("tbody", {},
    rows.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name),
      h("td", {}, value))))));
}

function usageText(usage) {
  return `${plural(usage.total_tokens ?? 0, "token")}, ${
    plural(usage.model_calls ?? 0, "model call")}, ${plural(usage.tool_calls ?? 0, "tool call")}`;
}

// One bar per step, placed by its times relative to the run's creation; retries, takeovers and
// waits inside the request are marked on the bar and named in its label. Under a step whose
// call started a child run (a sub-agent), that child: its agent (a link to its page), status
// and cost. Lanes are keyed, so a refresh leaves alone every lane that did not change (a
// child's link keeps the focus).
function renderTimeline(run, box) {
  // A step still unfinished ends where the run ended, or now while the run is live.
  const now = TERMINAL.has(run.status) ? run.finished_at ?? run.created_at : Date.now() / 1000;
  const start = run.created_at;
  const ends = run.steps.map((s) => s.completed_at ?? now);
  const end = Math.max(now, ...ends, start + 0.001);
  const span = end - start;
  const at = (t) => `${Math.max(0, Math.min(100, ((t - start) / span) * 100))}%`;
  let lanes = box.querySelector(".lanes");
  if (!lanes) {
    lanes = h("div", { class: "lanes", role: "list", "aria-label": "Steps on a time axis" });
    box.replaceChildren(h("div", { class: "axis", "aria-hidden": "true" }), lanes);
  }
  box.querySelector(".axis").replaceChildren(...[0, 0.25, 0.5, 0.75, 1].map((f) => {
    const tick = h("span", { class: "tick" }, secs(f * span));
    tick.style.left = `${f * 100}%`;
    return tick;
  }));
  const started = new Map();  // step key -> the child runs it started
  for (const child of run.children || []) {
    started.set(child.step, [...(started.get(child.step) || []), child]);
  }
  const items = [];
  for (const step of run.steps) {
    const finish = step.completed_at ?? now;
    items.push({ step, left: at(step.created_at), right: at(finish),
      took: secs(finish - step.created_at) });
    for (const child of started.get(step.key) || []) items.push({ child });
    started.delete(step.key);
  }
  for (const children of started.values()) for (const child of children) items.push({ child });
  reconcile(lanes, items, (item) => (item.child ? `child:${item.child.run_id}` : item.step.key),
    (item) => (item.child ? childLane(item.child) : stepLane(item)));
  if (!items.length) lanes.append(h("p", { class: "empty" }, "No step has started yet."));
}

function stepLane({ step, left, right, took }) {
  const notes = [];
  const retries = step.result?.model_retries ?? 0;
  if (step.attempts > 1) notes.push(`${step.attempts} attempts (taken over or retried)`);
  if (retries) notes.push(`waited out ${plural(retries, "model retry")}`);
  if (step.last_error) notes.push(`last error: ${step.last_error}`);
  const label = `${step.key} ${step.name}: ${step.status}, ${took}` +
    (notes.length ? `; ${notes.join("; ")}` : "");
  const bar = h("div", {
    class: `bar ${step.kind} ${step.status}${step.attempts > 1 ? " retried" : ""}`,
    role: "img", "aria-label": label, title: label,
    dataset: { step: step.key, attempts: step.attempts, status: step.status },
  });
  bar.style.left = left;
  bar.style.width = `max(4px, calc(${right} - ${left}))`;
  if (step.attempts > 1) {
    const mark = h("span", { class: "retry", title: `attempt ${step.attempts} started here` },
      `×${step.attempts}`);
    bar.append(mark);
  }
  if (retries) bar.append(h("span", { class: "wait" }, `⏳${retries}`));
  return h("div", { class: "lane", role: "listitem" },
    h("span", { class: "step-name" }, `${step.key} `, h("small", {}, step.name)),
    h("div", { class: "track" }, bar));
}

// A child run under the step whose call started it.
function childLane(child) {
  const stop = child.budget_stop ? `stopped by ${child.budget_stop}` : child.stop_reason;
  return h("div", { class: "lane child-run", role: "listitem",
    dataset: { childRun: child.run_id, parentStep: child.step, status: child.status } },
  h("span", { class: "step-name" }, "↳ child run"),
  h("div", { class: "child-info" },
    h("a", { class: "child-link", href: `#/runs/${encodeURIComponent(child.run_id)}`,
      "aria-label": `${child.agent}: child run ${child.run_id}, ${child.status}` }, child.agent),
    " ", statusBadge(child.status), stop && stop !== child.status ? ` ${stop}` : "",
    " · ", h("span", { class: "child-cost" }, dollars(child.cost?.usd)),
    " · ", h("code", { class: "child-id" }, child.run_id)));
}

// The transcript: each text, call and response of the conversation, a response with the
// files its tool stored.
function renderTranscript(transcript, run, list) {
  const items = [];
  const byUri = storedFiles(run);
  for (const content of transcript.contents) {
    for (const part of content.parts) {
      const call = part.function_call || part.functionCall;
      const response = part.function_response || part.functionResponse;
      if (call) {
        items.push(h("li", { class: "call" }, h("span", { class: "who" }, "model calls"),
          h("code", {}, call.name), h("pre", {}, JSON.stringify(call.args ?? {}, null, 2))));
      } else if (response) {
        const failed = response.response && "error" in response.response;
        const files = responseFiles(response, byUri);
        items.push(h("li", { class: failed ? "response error" : "response" },
          h("span", { class: "who" }, failed ? "tool failed" : "tool answered"),
          h("code", {}, response.name), h("pre", {}, JSON.stringify(response.response, null, 2)),
          files.length ? h("div", { class: "files" }, files.map((f) => fileView(run.run_id, f)))
            : null));
      } else if (typeof part.text === "string") {
        const who = part.thought ? "model thought" : content.role === "model" ? "model" : "user";
        items.push(h("li", { class: part.thought ? "thought" : content.role },
          h("span", { class: "who" }, who), h("p", {}, part.text)));
      }
    }
  }
  if (run.error) {
    items.push(h("li", { class: "error" }, h("span", { class: "who" }, "run failed"),
      h("p", {}, run.error)));
  }
  if (!items.length) items.push(h("li", { class: "empty" }, "Nothing in the transcript yet."));
  list.replaceChildren(...items);
}

// The run's spans as an indented list (children under their parent, by start time, each span's
// events under it), when the API offers a trace of the run.
async function showTrace(runId, box, signal) {
  const response = await fetch(`/runs/${encodeURIComponent(runId)}/trace`,
    { headers: headers(), signal });
  if (!response.ok) return;
  const spans = ((await response.json()).spans || []).sort((a, b) => a.start - b.start);
  if (!spans.length) return;
  const known = new Set(spans.map((span) => span.span_id));
  const children = new Map();
  for (const span of spans) {
    const parent = known.has(span.parent_span_id) ? span.parent_span_id : null;
    children.set(parent, [...(children.get(parent) || []), span]);
  }
  const rows = [];
  const walk = (parent, depth) => {
    for (const span of children.get(parent) || []) {
      const step = span.attributes?.["ackloop.step"];
      const row = h("li", { dataset: { spanId: span.span_id } }, h("code", {}, span.name),
        step ? ` ${step}` : "", h("small", {}, ` ${span.service} · ${
          ((span.end - span.start) * 1000).toFixed(1)} ms`));
      row.style.paddingLeft = `${depth * 1.2}rem`;
      rows.push(row);
      // What happened inside the delivery (model call, tool call, commit, publish): its events.
      for (const event of span.events || []) {
        const took = event.attributes?.duration_ms;
        const item = h("li", { class: "event" }, `· ${event.name}`,
          typeof took === "number" ? h("small", {}, ` ${took.toFixed(1)} ms`) : "");
        item.style.paddingLeft = `${(depth + 1) * 1.2}rem`;
        rows.push(item);
      }
      walk(span.span_id, depth + 1);
    }
  };
  walk(null, 0);
  box.hidden = false;
  box.replaceChildren(h("h2", {}, "Trace"), h("p", { class: "hint" },
    `${plural(spans.length, "span")} across every service; the same trace id in Cloud Trace.`),
  h("ol", { class: "spans" }, rows));
}

