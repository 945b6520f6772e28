// The run inspector: three views over the HTTP API, chosen by the URL's hash.
//   #/               the caller's runs, filterable, refreshed every few seconds
//   #/runs/<run_id>  one run: status, the calls waiting for a decision, the text being
//                    written, answer, cost, timeline of its steps (with the child runs its
//                    sub-agents' calls started, each under its step), transcript; a child
//                    run links to its parent
//   #/dead-letters   dead letters (with redrive) and poison, for operators
//   #/evals, #/evals/<eval_id>   eval reports and one eval's cases (evals.js)
// Everything is read with fetch so the bearer token (kept in sessionStorage) goes with it;
// data is put in the page as text, never as HTML.

import { evalListView, evalView } from "./evals.js";

const LIST_REFRESH_MS = 3000;
const RUN_REFRESH_MS = 1000;
const LETTERS_REFRESH_MS = 5000;
const TERMINAL = new Set(["completed", "failed", "cancelled"]);

const main = document.getElementById("main");
const notice = document.getElementById("notice");
const tokenInput = document.getElementById("token");

// What the current view started (timers, a stream); stopped when the view changes.
let stopView = () => {};

// -- helpers ---------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
  return el;
}

function say(message) {
  notice.textContent = message;
  notice.hidden = !message;
}

class ApiFailure extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const token = sessionStorage.getItem("ackloop-token");
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (response.status === 401) {
    throw new ApiFailure(401, "The API needs a token: enter it in the API token field above.");
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new ApiFailure(response.status, body.error || `${response.status} from ${path}`);
  }
  return body;
}

// Runs a view's refresh; says what went wrong instead of throwing.
async function attempt(work) {
  try {
    await work();
    if (notice.dataset.source === "refresh") say("");
  } catch (error) {
    if (error.name === "AbortError") return;
    notice.dataset.source = "refresh";
    say(error.message);
  }
}

function every(ms, work) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    await attempt(work);
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

const when = (seconds) => (seconds ? new Date(seconds * 1000).toLocaleString() : "");
const secs = (s) => (s === null || s === undefined ? "" : `${Number(s).toFixed(s < 10 ? 2 : 1)} s`);
const dollars = (usd) => (typeof usd === "number" ? `$${usd.toFixed(usd < 0.01 ? 6 : 4)}` : "—");
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// Puts a table's rows in the order of ``items`` while leaving alone every row whose item did
// not change (``signature`` compares them), so a refresh moves neither the keyboard focus, a
// selection nor a click under way. A changed row is built anew; if it held the focus, the
// control of the same kind in its new row takes it.
function reconcile(body, items, keyOf, build, signature = (item) => JSON.stringify(item)) {
  const before = new Map();
  for (const row of body.children) if (row.dataset.key) before.set(row.dataset.key, row);
  let refocus = null;
  const keys = new Set();
  const rows = items.map((item, i) => {
    let key = String(keyOf(item) ?? "");
    if (keys.has(key)) key = `${key}#${i}`;  // two items under one key still get a row each
    keys.add(key);
    const sig = signature(item);
    const old = before.get(key);
    if (old && old.dataset.sig === sig) return old;
    const row = build(item);
    row.dataset.key = key;
    row.dataset.sig = sig;
    const focused = document.activeElement;
    if (old && focused && focused !== document.body && old.contains(focused)) {
      const kind = focused.tagName.toLowerCase() + [...focused.classList].map((c) => `.${c}`).join("");
      refocus = row.querySelector(kind);
    }
    return row;
  });
  rows.forEach((row, i) => {
    if (body.children[i] !== row) body.insertBefore(row, body.children[i] || null);
  });
  while (body.children.length > rows.length) body.lastElementChild.remove();
  if (refocus) refocus.focus();
}

function statusBadge(status) {
  return h("span", { class: `badge ${status}` }, status);
}

// -- run list --------------------------------------------------------------------------------

const filters = { status: "", agent: "", conversation_id: "" };

function runListView() {
  const body = h("tbody");
  const refresh = async () => {
    const query = new URLSearchParams({ limit: "50" });
    for (const [name, value] of Object.entries(filters)) if (value) query.set(name, value);
    const { runs } = await api(`/runs?${query}`);
    reconcile(body, runs, (run) => run.run_id, runRow);
    if (!runs.length) {
      body.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No runs match.")));
    }
  };
  const status = h("select", { id: "filter-status" },
    ["", "queued", "running", "completed", "failed", "cancelled"].map((value) =>
      h("option", { value, selected: filters.status === value }, value || "any")));
  const agent = h("input", { id: "filter-agent", value: filters.agent, autocomplete: "off" });
  const conversation = h("input", { id: "filter-conversation", value: filters.conversation_id,
    autocomplete: "off" });
  let typing = null;
  const changed = () => {
    filters.status = status.value;
    filters.agent = agent.value.trim();
    filters.conversation_id = conversation.value.trim();
    clearTimeout(typing);
    typing = setTimeout(() => attempt(refresh), 250);
  };
  for (const input of [status, agent, conversation]) {
    input.addEventListener("change", changed);
    input.addEventListener("input", changed);
  }
  main.replaceChildren(
    h("h1", {}, "Runs"),
    h("form", { id: "filters", class: "filters", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "filter-status" }, "Status"), status,
      h("label", { for: "filter-agent" }, "Agent"), agent,
      h("label", { for: "filter-conversation" }, "Conversation"), conversation),
    h("div", { class: "scroll" },
      h("table", { id: "run-list" },
        h("caption", { class: "visually-hidden" }, "Your runs, newest first"),
        h("thead", {}, h("tr", {}, ["Status", "Agent", "Question", "Created", "Cost"]
          .map((name) => h("th", { scope: "col" }, name)))),
        body)));
  const stop = every(LIST_REFRESH_MS, refresh);
  return () => { stop(); clearTimeout(typing); };
}

function runRow(run) {
  const href = `#/runs/${encodeURIComponent(run.run_id)}`;
  return h("tr", { dataset: { runId: run.run_id }, onclick: (event) => {
    if (!event.target.closest("a")) location.hash = href;
  } },
  h("td", { class: "status" }, statusBadge(run.status)),
  h("td", { class: "agent" }, run.agent),
  h("td", { class: "text" }, h("a", { class: "run-link", href }, run.text)),
  h("td", { class: "created" }, when(run.created_at)),
  h("td", { class: "cost" }, dollars(run.cost?.usd)));
}

// -- one run ---------------------------------------------------------------------------------

function runView(runId) {
  const section = h("section", { id: "run", "aria-labelledby": "run-title" });
  const controller = new AbortController();
  let timer = null;
  let stopped = false;
  let traceShown = false;
  let transcriptKey = "";
  main.replaceChildren(h("p", {}, h("a", { href: "#/" }, "← All runs")), section);

  const parts = {
    parent: h("p", { id: "parent-run", hidden: true }),
    status: h("p", { id: "run-status" }),
    error: h("p", { id: "run-error", class: "error", hidden: true }),
    cancel: h("button", { id: "cancel", type: "button", disabled: true }, "Cancel run"),
    facts: h("dl", { class: "facts" }),
    approvals: h("section", { id: "approvals", "aria-labelledby": "approvals-title",
      hidden: true }, h("h2", { id: "approvals-title" }, "Waiting for your decision")),
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
    parts.approvals,
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

  // Re-read the run every second while it is live, and at once when its stream says a step
  // completed or the run finished.
  let following = false;
  async function loop() {
    let run = null;
    await attempt(async () => { run = await refresh(); });
    if (stopped || (run && TERMINAL.has(run.status))) return;
    if (run && !following) {
      following = true;
      // A step (the run's or a child run's), a wait or the end changes the run; a delta
      // (text being written) does not.
      follow(runId, controller.signal, (event) => (event.type === "delta" ? live.add(event)
        : attempt(refresh)));
    }
    timer = setTimeout(loop, RUN_REFRESH_MS);
  }
  loop();
  return () => { stopped = true; clearTimeout(timer); controller.abort(); };
}

// The text of the model step being written, from the stream's delta events: per step, only
// its highest attempt (a retried or taken-over step streams again from seq 0 under a new one,
// and a superseded attempt's late deltas are dropped); cleared once the step has committed.
function liveText(label, box) {
  let step = "";
  let attemptNo = 0;
  let next = 0;
  let text = "";
  const committed = new Set();
  const show = () => {
    box.textContent = text;
    box.dataset.step = step;
    box.dataset.attempt = String(attemptNo);
    label.hidden = !text;
    label.textContent = text ? `Being written (step ${step}, attempt ${attemptNo}):` : "";
  };
  return {
    add(delta) {
      if (committed.has(delta.step) || delta.step < step) return;
      if (delta.step > step || delta.attempt > attemptNo) {
        [step, attemptNo, next, text] = [delta.step, delta.attempt, 0, ""];
      } else if (delta.attempt < attemptNo) {
        return;
      }
      if (delta.seq === 0 && next > 0) [next, text] = [0, ""];  // a resumed stream: again
      if (delta.seq !== next) return;
      next += 1;
      text += delta.text;
      show();
    },
    committed(run) {
      for (const s of run.steps) if (s.status === "completed") committed.add(s.key);
      if (step && (committed.has(step) || TERMINAL.has(run.status))) {
        [attemptNo, next, text] = [0, 0, ""];
        show();
      }
    },
  };
}

// One panel per tool call that waits for an approval: its arguments (editable: approving
// with edited ones), a comment, approve and reject. A panel stays while its call waits, and
// after this page decided it, with the outcome; a call decided elsewhere loses its panel.
function renderApprovals(runId, run, box, onDecided) {
  const waiting = (run.waiting || []).filter((w) => w.waiting_for === "approval");
  const open = new Set(waiting.map((w) => w.step));
  for (const panel of box.querySelectorAll("div.approval")) {
    if (!open.has(panel.dataset.step) && !panel.dataset.decided) panel.remove();
  }
  const shown = new Set([...box.querySelectorAll("div.approval")].map((p) => p.dataset.step));
  for (const call of waiting) {
    if (!shown.has(call.step)) box.append(approvalPanel(runId, call, onDecided));
  }
  box.hidden = !box.querySelector("div.approval");
  box.querySelector("h2").textContent = box.querySelector("div.approval:not([data-decided])")
    ? "Waiting for your decision" : "Decided";
}

// JSON with sorted keys: edited arguments count as edited only when they differ.
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${
      canonical(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

function approvalPanel(runId, call, onDecided) {
  const id = `approval-${call.step}`;
  const args = h("textarea", { class: "args", id: `${id}-args`, rows: 4, spellcheck: "false",
    autocomplete: "off" });
  args.value = JSON.stringify(call.args, null, 2);
  const comment = h("textarea", { class: "comment", id: `${id}-comment`, rows: 2,
    maxlength: 2000 });
  const approve = h("button", { type: "button", class: "approve" }, "Approve");
  const reject = h("button", { type: "button", class: "reject" }, "Reject");
  const outcome = h("p", { class: "outcome", role: "status" });
  const panel = h("div", { class: "approval", role: "group", "aria-labelledby": `${id}-title`,
    dataset: { step: call.step } },
  h("h3", { id: `${id}-title` }, "Approve ", h("code", {}, call.tool), "?"),
  h("p", { class: "hint" }, `Step ${call.step}, waiting since ${when(call.since)}. `,
    `Undecided by ${when(call.deadline)}, it is rejected.`),
  h("label", { for: args.id }, "Arguments (JSON: approve with your edits)"), args,
  h("label", { for: comment.id }, "Comment (the model reads it with a rejection)"), comment,
  h("div", { class: "decide" }, approve, reject), outcome);
  const tell = (message, failed) => {
    outcome.textContent = message;
    outcome.classList.toggle("error", failed);
  };
  const decide = async (decision) => {
    const body = { decision };
    if (decision === "approve") {
      let edited;
      try {
        edited = JSON.parse(args.value);
      } catch (error) {
        tell(`The arguments are not valid JSON: ${error.message}`, true);
        args.focus();
        return;
      }
      if (!edited || typeof edited !== "object" || Array.isArray(edited)) {
        tell("The arguments must be a JSON object, like {\"name\": \"value\"}.", true);
        args.focus();
        return;
      }
      if (canonical(edited) !== canonical(call.args)) body.args = edited;
    }
    if (comment.value.trim()) body.comment = comment.value.trim();
    approve.disabled = reject.disabled = true;
    tell(decision === "approve" ? "Approving…" : "Rejecting…", false);
    try {
      const result = await api(`/runs/${encodeURIComponent(runId)}/approvals/${
        encodeURIComponent(call.step)}`, { method: "POST", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json" } });
      panel.dataset.decided = result.decision;
      args.readOnly = comment.readOnly = true;
      tell(`${result.decision === "approve" ? "Approved" : "Rejected"} by ${result.by}${
        result.args ? " with edited arguments" : ""}${
        result.recorded ? "" : " (recorded before)"}: the run goes on.`, false);
      onDecided();
    } catch (error) {
      // 409: decided otherwise (or no longer waiting): the panel stays, saying so; else the
      // person may fix what the API named and try again.
      if (error.status === 409) panel.dataset.decided = "conflict";
      else approve.disabled = reject.disabled = false;
      tell(error.status ? error.message : `Could not reach the API: ${error.message}`, true);
    }
  };
  approve.addEventListener("click", () => decide("approve"));
  reject.addEventListener("click", () => decide("reject"));
  return panel;
}

// The run's event stream (ndjson, read with fetch so the token is sent): calls onEvent for each.
async function follow(runId, signal, onEvent) {
  try {
    const response = await fetch(`/runs/${encodeURIComponent(runId)}/events`,
      { headers: headers(), signal });
    if (!response.ok || !response.body) return;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffered += value;
      let end;
      while ((end = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, end).trim();
        buffered = buffered.slice(end + 1);
        if (line) onEvent(JSON.parse(line));
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") console.warn("event stream ended", error);
  }
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
  renderCost(run, parts.cost);
  renderTimeline(run, parts.timeline);
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

// What a live run waits for: a person's decision (a panel each), named events (no panel: they
// come through the API, the CLI or Pub/Sub).
function waitingFor(run) {
  if (TERMINAL.has(run.status) || !run.waiting?.length) return "";
  const what = new Set(run.waiting.map((w) => (w.waiting_for === "approval" ? "a decision"
    : w.event_name?.startsWith("child.") ? "its child runs" : `event ${w.event_name}`)));
  return ` · waiting for ${[...what].join(", ")}`;
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

// The files the run's steps stored (a tool's image or document), by URI: what a function
// response's parts name. Their bytes come from GET /runs/{id}/files/{sha256}, read with fetch
// (so the token goes with it) into a blob URL, kept per file while the page lives.
const fileUrls = new Map();

function storedFiles(run) {
  const byUri = new Map();
  for (const step of run.steps || []) {
    for (const file of step.result?.response?.files || []) byUri.set(file.uri, file);
  }
  return byUri;
}

function fileUrl(runId, file) {
  const key = `${runId}/${file.sha256}`;
  if (!fileUrls.has(key)) {
    fileUrls.set(key, fetch(`/runs/${encodeURIComponent(runId)}/files/${file.sha256}`,
      { headers: headers() }).then((response) => {
      if (!response.ok) throw new ApiFailure(response.status, `${response.status} for ${file.name}`);
      return response.blob();
    }).then((blob) => URL.createObjectURL(blob)).catch((error) => {
      fileUrls.delete(key);
      throw error;
    }));
  }
  return fileUrls.get(key);
}

// A thumbnail for an image, a link for any other file.
function fileView(runId, file) {
  const label = `${file.name || file.sha256.slice(0, 12)} (${file.mime_type}, ${file.size} bytes)`;
  if (file.mime_type.startsWith("image/")) {
    const img = h("img", { class: "thumbnail", alt: label, title: label,
      dataset: { sha256: file.sha256 } });
    fileUrl(runId, file).then((url) => { img.src = url; }).catch(() => { img.alt = `${label}: not available`; });
    return h("figure", { class: "file" }, img, h("figcaption", {}, label));
  }
  const link = h("a", { class: "file-link", href: "#", dataset: { sha256: file.sha256 },
    onclick: (event) => {
      event.preventDefault();
      fileUrl(runId, file).then((url) => window.open(url, "_blank", "noopener"))
        .catch((error) => say(error.message));
    } }, label);
  return h("figure", { class: "file" }, link);
}

// The files one function response carries: its parts' stored files, then those its response
// names but the model was not shown ({"file": name, ...}).
function responseFiles(response, byUri) {
  const found = [];
  for (const part of response.parts || []) {
    const data = part.file_data || part.fileData;
    const file = data && byUri.get(data.file_uri || data.fileUri);
    if (file) found.push(file);
  }
  const named = new Set();
  const walk = (value) => {
    if (Array.isArray(value)) value.forEach(walk);
    else if (value && typeof value === "object") {
      if (typeof value.file === "string" && value.note) named.add(value.file);
      Object.values(value).forEach(walk);
    }
  };
  walk(response.response);
  for (const file of byUri.values()) {
    if (named.has(file.name) && !found.includes(file)) found.push(file);
  }
  return found;
}

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

// -- dead letters and poison -----------------------------------------------------------------

function deadLettersView() {
  const letters = h("tbody");
  const poison = h("tbody");
  const outcomes = new Map();  // message id -> what its redrive answered, until reloaded
  const refresh = async () => {
    const [dead, rejected] = await Promise.all([api("/dead-letters"), api("/poison")]);
    reconcile(letters, dead.dead_letters, (letter) => letter.message_id,
      (letter) => letterRow(letter, outcomes, refresh),
      (letter) => JSON.stringify([letter, outcomes.get(letter.message_id) || ""]));
    if (!dead.dead_letters.length) {
      letters.append(h("tr", {}, h("td", { colspan: 6, class: "empty" }, "No dead letters.")));
    }
    reconcile(poison, rejected.poison, (p) => p.message_id, (p) => h("tr", { dataset: {
      messageId: p.message_id } },
    h("td", {}, when(p.received_at)), h("td", {}, p.kind || ""), h("td", {}, p.reason || ""),
    h("td", {}, p.error || ""), h("td", {}, h("code", { class: "preview" }, p.data_preview))));
    if (!rejected.poison.length) {
      poison.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No poison.")));
    }
  };
  const head = (names) => h("thead", {}, h("tr", {}, names.map((n) => h("th", { scope: "col" }, n))));
  main.replaceChildren(
    h("h1", {}, "Dead letters"),
    h("p", { class: "hint" }, "Messages that used up their delivery attempts. Re-drive one " +
      "once its cause is fixed: its run is reopened and the message published again."),
    h("div", { class: "scroll" }, h("table", { id: "dead-letters" },
      head(["Received", "Run", "Step", "Cause", "Outcome", ""]), letters)),
    h("h2", {}, "Poison"),
    h("p", { class: "hint" }, "Messages acknowledged without effect, with the reason."),
    h("div", { class: "scroll" }, h("table", { id: "poison" },
      head(["Received", "Kind", "Reason", "Error", "Data"]), poison)));
  return every(LETTERS_REFRESH_MS, refresh);
}

function letterRow(letter, outcomes, refresh) {
  const outcome = letter.redrive_outcome || outcomes.get(letter.message_id) || "";
  const button = h("button", { type: "button", class: "redrive",
    disabled: Boolean(letter.redriven_at) || !letter.origin,
    title: letter.origin ? null : "not one of a run's messages: it cannot be re-driven" },
  "Re-drive");
  const outcomeCell = h("td", { class: "outcome" }, outcome);
  button.addEventListener("click", async () => {
    button.disabled = true;
    outcomeCell.textContent = "re-driving…";
    await attempt(async () => {
      const result = await api(`/dead-letters/${encodeURIComponent(letter.message_id)}/redrive`,
        { method: "POST" });
      outcomes.set(letter.message_id, result.outcome);
      outcomeCell.textContent = result.outcome;
    });
    await attempt(refresh);
  });
  const run = letter.run_id
    ? h("a", { href: `#/runs/${encodeURIComponent(letter.run_id)}` }, letter.run_id) : "";
  return h("tr", { dataset: { messageId: letter.message_id } },
    h("td", {}, when(letter.received_at)), h("td", {}, run),
    h("td", { class: "step" }, letter.step || ""),
    h("td", { class: "cause" }, letter.cause), outcomeCell, h("td", {}, button));
}

// -- routing ---------------------------------------------------------------------------------

// What the eval pages (evals.js) use of this module.
const ui = { h, api, attempt, every, reconcile, main, when, secs, dollars, plural };

function route() {
  stopView();
  say("");
  const hash = location.hash || "#/";
  const run = hash.match(/^#\/runs\/(.+)$/);
  const evaluation = hash.match(/^#\/evals\/(.+)$/);
  if (run) stopView = runView(decodeURIComponent(run[1]));
  else if (evaluation) stopView = evalView(ui, decodeURIComponent(evaluation[1]));
  else if (hash === "#/evals") stopView = evalListView(ui);
  else if (hash === "#/dead-letters") stopView = deadLettersView();
  else stopView = runListView();
  for (const link of document.querySelectorAll("nav a")) {
    const href = link.getAttribute("href");
    if (href === hash || (href !== "#/" && hash.startsWith(`${href}/`))) {
      link.setAttribute("aria-current", "page");
    } else {
      link.removeAttribute("aria-current");
    }
  }
}

tokenInput.value = sessionStorage.getItem("ackloop-token") || "";
tokenInput.addEventListener("change", () => {
  const token = tokenInput.value.trim();
  if (token) sessionStorage.setItem("ackloop-token", token);
  else sessionStorage.removeItem("ackloop-token");
  route();
});
window.addEventListener("hashchange", route);
route();
