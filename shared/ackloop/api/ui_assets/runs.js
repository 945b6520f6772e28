// The caller's runs (#/): filterable, refreshed every few seconds; a child run (a sub-agent's
// call) shows under its parent, indented, or, when its parent is not on the page, at its place
// with a link to its parent.

import {
  api, attempt, dollars, every, h, main, reconcile, statusBadge, when,
} from "./ui.js";

const LIST_REFRESH_MS = 3000;

// The list's filters, kept while the page lives (a run's conversation link sets one).
export const filters = { status: "", agent: "", conversation_id: "" };

export function runListView() {
  const body = h("tbody");
  const refresh = async () => {
    const query = new URLSearchParams({ limit: "50" });
    for (const [name, value] of Object.entries(filters)) if (value) query.set(name, value);
    const { runs } = await api(`/runs?${query}`);
    reconcile(body, nest(runs), (row) => row.run.run_id, runRow);
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
        h("caption", { class: "visually-hidden" },
          "Your runs, newest first, each child run under its parent"),
        h("thead", {}, h("tr", {}, ["Status", "Agent", "Question", "Created", "Cost"]
          .map((name) => h("th", { scope: "col" }, name)))),
        body)));
  const stop = every(LIST_REFRESH_MS, refresh);
  return () => { stop(); clearTimeout(typing); };
}

// The page's runs as rows: each run whose parent is not on the page at its place (newest
// first), each child under its parent in the order of the parent's steps that started them
// (step keys sort in execution order; parallel calls start their children at once), at any
// depth. ``orphan``: a child whose parent is not on the page.
export function nest(runs) {
  const onPage = new Set(runs.map((run) => run.run_id));
  const children = new Map();
  for (const run of runs) {
    const parent = run.parent_run_id;
    if (parent && onPage.has(parent)) children.set(parent, [...(children.get(parent) || []), run]);
  }
  const rows = [];
  const placed = new Set();
  const add = (run, depth) => {
    if (placed.has(run.run_id)) return;
    placed.add(run.run_id);
    rows.push({ run, depth, orphan: depth === 0 && Boolean(run.parent_run_id) });
    const kids = [...(children.get(run.run_id) || [])].sort(byStep);
    for (const kid of kids) add(kid, depth + 1);
  };
  for (const run of runs) if (!run.parent_run_id || !onPage.has(run.parent_run_id)) add(run, 0);
  for (const run of runs) add(run, 0);  // none is left out, whatever their parents say
  return rows;
}

function byStep(a, b) {
  const [one, other] = [a.parent_step || "", b.parent_step || ""];
  if (one !== other) return one < other ? -1 : 1;
  return a.created_at - b.created_at;
}

function runRow({ run, depth, orphan }) {
  const href = `#/runs/${encodeURIComponent(run.run_id)}`;
  const parentHref = run.parent_run_id ? `#/runs/${encodeURIComponent(run.parent_run_id)}` : null;
  const question = h("td", { class: "text" },
    depth ? h("span", { class: "nest", "aria-hidden": "true" }, "↳ ") : null,
    h("a", { class: "run-link", href }, run.text),
    depth ? h("span", { class: "visually-hidden" }, ` (child run of ${run.parent_run_id})`)
      : null,
    orphan ? h("small", { class: "parent-of" }, h("br"), "↳ child run of ",
      h("a", { class: "parent-link", href: parentHref }, h("code", {}, run.parent_run_id)))
      : null);
  if (depth) question.style.paddingLeft = `${0.5 + depth * 1.5}rem`;
  const dataset = { runId: run.run_id, depth: String(depth) };
  if (run.parent_run_id) dataset.parentRunId = run.parent_run_id;
  return h("tr", { class: depth || orphan ? "child" : null, dataset, onclick: (event) => {
    if (!event.target.closest("a")) location.hash = href;
  } },
  h("td", { class: "status" }, statusBadge(run.status)),
  h("td", { class: "agent" }, run.agent),
  question,
  h("td", { class: "created" }, when(run.created_at)),
  h("td", { class: "cost" }, dollars(run.cost?.usd)));
}
