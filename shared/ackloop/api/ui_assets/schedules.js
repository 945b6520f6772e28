// The deployment's schedules (#/schedules), over GET /schedules: each with its agent, when it
// fires, its overlap policy, whether it is paused, its next firings and its last firings, each
// with its run's link. Pausing, resuming and triggering are for operators (the API answers 403
// to anyone else, and the page says so); the list is read again after each.

import { api, attempt, every, h, main, reconcile } from "./ui.js";

const SCHEDULES_REFRESH_MS = 3000;
const NEXT_SHOWN = 3;
const LAST_SHOWN = 5;

// A firing's outcome as a badge of the run list's colours: it started a run, or did not.
const OUTCOME_BADGE = { started: "completed", manual: "completed", backfill: "completed",
  buffered: "running", cancelled_other: "running", failed: "failed" };

// Unix seconds as "2025-01-02 03:04:05 UTC".
const utc = (seconds) => `${new Date(seconds * 1000).toISOString()
  .replace("T", " ").replace(/\.\d+Z$/, "")} UTC`;

function whenText(spec) {
  if (spec.every_seconds) return `every ${spec.every_seconds} s`;
  return `${spec.cron} (${spec.time_zone})`;
}

const stateOf = (schedule) => (schedule.paused ? "paused"
  : schedule.next_fire_at === null ? "over" : "active");

export function schedulesView() {
  const body = h("tbody");
  const outcome = h("p", { id: "schedule-action", role: "status", class: "hint" });
  const refresh = async () => {
    const { schedules } = await api("/schedules");
    reconcile(body, schedules, (s) => s.id, (s) => scheduleRow(s, act));
    if (!schedules.length) {
      body.append(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No schedules: " +
        "declare a Schedule beside your agents, or create one with ackloop schedules create.")));
    }
  };
  // An operator's action on one schedule: its answer (or why not) said, then the list read.
  const act = async (schedule, action, buttons) => {
    for (const button of buttons) button.disabled = true;
    outcome.classList.remove("error");
    outcome.textContent = `${action} ${schedule.id}…`;
    try {
      const answer = await api(`/schedules/${encodeURIComponent(schedule.id)}/${action}`,
        { method: "POST" });
      outcome.replaceChildren(...said(schedule.id, action, answer));
    } catch (error) {
      outcome.classList.add("error");
      outcome.textContent = `Could not ${action} ${schedule.id}: ${error.message}`;
    }
    for (const button of buttons) button.disabled = false;
    await attempt(refresh);
  };
  main.replaceChildren(
    h("h1", {}, "Schedules"),
    h("p", { class: "hint" }, "Each firing starts a run of the schedule's agent. Times are " +
      "UTC. Pausing, resuming and triggering are for operators."),
    outcome,
    h("div", { class: "scroll" },
      h("table", { id: "schedule-list" },
        h("caption", { class: "visually-hidden" }, "The deployment's schedules, by id"),
        h("thead", {}, h("tr", {}, ["Schedule", "Agent", "When", "Overlap", "State",
          "Next firings", "Last firings", ""].map((name) => h("th", { scope: "col" }, name)))),
        body)));
  return every(SCHEDULES_REFRESH_MS, refresh);
}

function said(id, action, answer) {
  if (action !== "trigger") return [`${id}: ${answer.paused ? "paused" : "resumed"}.`];
  const run = answer.run_id
    ? h("a", { class: "triggered-run", href: `#/runs/${encodeURIComponent(answer.run_id)}` },
      answer.run_id) : "no run";
  return [`${id}: triggered (${answer.outcome}), `, run, "."];
}

function scheduleRow(schedule, act) {
  const { spec } = schedule;
  const state = stateOf(schedule);
  const toggle = h("button", { type: "button", class: "toggle" },
    schedule.paused ? "Resume" : "Pause");
  const trigger = h("button", { type: "button", class: "trigger" }, "Trigger now");
  const buttons = [toggle, trigger];
  toggle.addEventListener("click", () => act(schedule, schedule.paused ? "resume" : "pause",
    buttons));
  trigger.addEventListener("click", () => act(schedule, "trigger", buttons));
  const next = schedule.next_firings.slice(0, NEXT_SHOWN);
  const last = schedule.firings.slice(-LAST_SHOWN).reverse();
  return h("tr", { dataset: { scheduleId: schedule.id, state } },
    h("td", { class: "id" }, h("code", {}, schedule.id), h("br"),
      h("small", { class: "source" }, schedule.source)),
    h("td", { class: "agent" }, spec.agent),
    h("td", { class: "when" }, whenText(spec)),
    h("td", { class: "overlap" }, spec.overlap),
    h("td", { class: "state" }, h("span", { class: `badge ${state === "active" ? "running"
      : "queued"}` }, state)),
    h("td", { class: "next" }, next.length ? h("ol", { class: "times" }, next.map((at) =>
      h("li", {}, h("time", { datetime: new Date(at * 1000).toISOString() }, utc(at)))))
      : h("span", { class: "empty" }, "none")),
    h("td", { class: "last" }, last.length ? h("ol", { class: "times" }, last.map(firingItem))
      : h("span", { class: "empty" }, "none yet")),
    h("td", { class: "actions" }, toggle, " ", trigger));
}

function firingItem(firing) {
  const badge = h("span", { class: `badge ${OUTCOME_BADGE[firing.outcome] || "queued"}`,
    title: firing.detail || null }, firing.outcome);
  const run = firing.run_id
    ? h("a", { class: "firing-run", href: `#/runs/${encodeURIComponent(firing.run_id)}` },
      utc(firing.at)) : utc(firing.at);
  const dataset = { outcome: firing.outcome, at: String(firing.at) };
  if (firing.run_id) dataset.runId = firing.run_id;
  return h("li", { dataset }, run, " ", badge);
}
