// What a live run shows as it goes, on its page and in the chat pane: the text being written
// (from the event stream's delta events), what it waits for, and a decision panel for each call
// that waits for a person's approval (POST /runs/{id}/approvals/{step}).

import { TERMINAL, api, attempt, follow, h, when } from "./ui.js";

const RUN_REFRESH_MS = 1000;

// The text of the model step being written, from the stream's delta events: per step, only
// its highest attempt (a retried or taken-over step streams again from seq 0 under a new one,
// and a superseded attempt's late deltas are dropped); cleared once the step has committed.
export function liveText(label, box) {
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
// after this page decided it, with the outcome; a call decided elsewhere loses its panel. A
// panel whose decision is on its way stays too: a refresh that lands between the API recording
// the decision and its answer reaching the page no longer lists the call as waiting.
// ``scope`` keeps the panels' element ids apart when a page shows several runs' panels. The
// box's heading (.approvals-title) says whether a call still waits.
export function renderApprovals(runId, run, box, onDecided, scope = "") {
  const waiting = (run.waiting || []).filter((w) => w.waiting_for === "approval");
  const open = new Set(waiting.map((w) => w.step));
  for (const panel of box.querySelectorAll("div.approval")) {
    const kept = panel.dataset.decided || panel.dataset.deciding;
    if (!open.has(panel.dataset.step) && !kept) panel.remove();
  }
  const shown = new Set([...box.querySelectorAll("div.approval")].map((p) => p.dataset.step));
  for (const call of waiting) {
    if (!shown.has(call.step)) box.append(approvalPanel(runId, call, onDecided, scope));
  }
  box.hidden = !box.querySelector("div.approval");
  const title = box.querySelector(".approvals-title");
  if (title) {
    title.textContent = box.querySelector("div.approval:not([data-decided])")
      ? "Waiting for your decision" : "Decided";
  }
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

function approvalPanel(runId, call, onDecided, scope) {
  const id = `approval-${scope}${call.step}`;
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
    panel.dataset.deciding = decision;
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
    } finally {
      delete panel.dataset.deciding;
    }
  };
  approve.addEventListener("click", () => decide("approve"));
  reject.addEventListener("click", () => decide("reject"));
  return panel;
}

// What a live run waits for, in its waits' own words (each kind's label: how it waits, and
// for what): "waiting for a decision, event receipt" · "asleep until 2026-12-08 09:00:00 UTC".
// A model step waiting for its place under its model's quota says so the same way.
export function waitingFor(run) {
  const waits = [...(run.waiting || []), ...(run.waiting_for_quota || [])];
  if (TERMINAL.has(run.status) || !waits.length) return "";
  const byHow = new Map();
  for (const { label: [how, what] } of waits) {
    byHow.set(how, (byHow.get(how) || new Set()).add(what));
  }
  return ` · ${[...byHow].map(([how, whats]) => `${how} ${[...whats].join(", ")}`).join(" · ")}`;
}

// Keeps a live run's view current: ``refresh`` (which reads the run and returns it) runs every
// second until the run has ended, and at once when the run's stream says a step (the run's or a
// child run's) completed, a call waits, or the run finished; a delta of its own (text being
// written) goes to ``onDelta`` instead. Returns what stops it (so does ``signal``, which also
// ends the stream).
export function keepRefreshed(runId, refresh, onDelta, signal) {
  let timer = null;
  let stopped = false;
  let following = false;
  async function loop() {
    let run = null;
    await attempt(async () => { run = await refresh(); });
    if (stopped || signal.aborted || (run && TERMINAL.has(run.status))) return;
    if (run && !following) {
      following = true;
      follow(runId, signal, (event) => {
        if (event.type !== "delta") attempt(refresh);
        else if (!event.run_id || event.run_id === runId) onDelta(event);  // not a child's
      });
    }
    timer = setTimeout(loop, RUN_REFRESH_MS);
  }
  loop();
  return () => { stopped = true; clearTimeout(timer); };
}
