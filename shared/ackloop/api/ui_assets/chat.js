// The chat pane (#/chat, #/chat/<conversation_id>): one conversation with an agent. Pick an
// agent (GET /agents), type a question, attach files (sent inline, in base64, with the
// question: POST /runs), and each run is followed live (its answer's text as it is written, a
// decision panel for each call that waits for a person); a follow-up names the conversation
// (POST /runs with conversation_id). Opening #/chat/<id> shows the conversation's runs so far
// (GET /conversations/{id}/runs). Each turn links to its run's page.

import { fileView, questionFiles } from "./files.js";
import { keepRefreshed, liveText, renderApprovals, waitingFor } from "./live.js";
import { filters } from "./runs.js";
import { TERMINAL, api, attempt, h, main, statusBadge } from "./ui.js";

const ACCEPT = "image/png,image/jpeg,image/webp,image/gif,application/pdf,audio/*";

export function chatView(conversationId) {
  const controller = new AbortController();
  const stops = [];
  const state = { conversation: conversationId, handedTo: null, pending: [] };
  const parts = {
    agent: h("select", { id: "chat-agent" }),
    conversation: h("p", { id: "chat-conversation", class: "hint" }),
    log: h("ol", { id: "chat-log", role: "log", "aria-label": "The conversation" }),
    input: h("textarea", { id: "chat-input", rows: 3, required: true,
      placeholder: "Ask a question (Enter sends, Shift+Enter starts a new line)" }),
    files: h("input", { id: "chat-files", type: "file", multiple: true, accept: ACCEPT }),
    attached: h("ul", { id: "chat-attached", class: "attached" }),
    send: h("button", { id: "chat-send", type: "submit" }, "Send"),
    error: h("p", { id: "chat-error", class: "error", role: "alert", hidden: true }),
  };
  const form = h("form", { id: "chat-form", class: "composer" },
    h("label", { for: "chat-input" }, "Your question"), parts.input,
    h("div", { class: "attach" }, h("label", { for: "chat-files" }, "Attach files"), parts.files,
      parts.attached),
    h("div", { class: "send" }, parts.send), parts.error);
  main.replaceChildren(h("section", { id: "chat", "aria-labelledby": "chat-title" },
    h("h1", { id: "chat-title" }, "Chat"),
    h("div", { class: "chat-head" },
      h("label", { for: "chat-agent" }, "Agent"), parts.agent,
      h("a", { id: "chat-new", href: "#/chat" }, "New conversation")),
    parts.conversation, parts.log, form));

  const watch = (runId) => {
    const turn = turnView(runId);
    parts.log.append(turn.el);
    turn.el.scrollIntoView({ block: "nearest" });
    let ended = false;
    const refresh = async () => {
      const run = await api(`/runs/${encodeURIComponent(runId)}`, { signal: controller.signal });
      turn.update(run, () => attempt(refresh));
      if (TERMINAL.has(run.status) && !ended) {
        ended = true;
        if (run.handed_to) offerHanded(parts.agent, run.handed_to);
      }
      return run;
    };
    stops.push(keepRefreshed(runId, refresh, (delta) => turn.live.add(delta), controller.signal));
  };

  parts.files.addEventListener("change", () => {
    state.pending.push(...parts.files.files);
    parts.files.value = "";  // the same file may be picked again
    showAttached(parts.attached, state.pending);
  });
  parts.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    await ask(state, parts, watch);
  });

  attempt(async () => {
    const [catalog, earlier] = await Promise.all([
      api("/agents", { signal: controller.signal }),
      state.conversation ? api(`/conversations/${encodeURIComponent(state.conversation)}/runs`,
        { signal: controller.signal }) : Promise.resolve({ runs: [] })]);
    const last = earlier.runs[earlier.runs.length - 1];
    chooseAgents(parts.agent, catalog, last);
    showConversation(parts.conversation, state.conversation);
    for (const run of earlier.runs) {
      if (TERMINAL.has(run.status)) {
        const turn = turnView(run.run_id);
        turn.update(run, () => {});
        parts.log.append(turn.el);
      } else {
        watch(run.run_id);
      }
    }
    if (!earlier.runs.length) {
      parts.log.append(h("li", { class: "empty" }, state.conversation
        ? "No run in this conversation yet: the first question starts it."
        : "Pick an agent and ask a question."));
    }
    parts.input.focus();
  });
  return () => { stops.forEach((stop) => stop()); controller.abort(); };
}

// The agents a query may name; the one picked: the conversation's (its last run's agent, or
// the agent it was handed to, which a follow-up naming no agent reaches), else the default.
function chooseAgents(select, catalog, last) {
  const names = catalog.agents.map((agent) => agent.name);
  select.replaceChildren(...catalog.agents.map((agent) => h("option", { value: agent.name },
    agent.name === catalog.default ? `${agent.name} (default)` : agent.name)));
  const chosen = last ? last.agent : catalog.default;
  select.value = names.includes(chosen) ? chosen : names[0] || "";
  if (last?.handed_to) offerHanded(select, last.handed_to);
}

// A conversation handed to another agent goes on with it: a run naming "default" in a
// conversation is the agent the conversation was handed to (which may be one no query names).
function offerHanded(select, agent) {
  let option = select.querySelector("option.handed");
  if (!option) {
    option = h("option", { class: "handed", value: "default" });
    select.prepend(option);
  }
  option.textContent = `${agent} (handed the conversation)`;
  option.selected = true;
}

function showConversation(box, conversation) {
  box.replaceChildren(...(conversation ? ["Conversation ", h("a", { id: "chat-conversation-link",
    href: "#/", onclick: () => { filters.conversation_id = conversation; } },
  h("code", {}, conversation)), ": each question below is a run of it."]
    : ["A new conversation: its first question starts it."]));
}

function showAttached(list, pending) {
  list.replaceChildren(...pending.map((file, i) => h("li", { dataset: { name: file.name } },
    `${file.name} (${file.type || "unknown type"}, ${file.size} bytes) `,
    h("button", { type: "button", class: "remove", "aria-label": `Remove ${file.name}`,
      onclick: () => { pending.splice(i, 1); showAttached(list, pending); } }, "×"))));
}

// A file's bytes as base64 (what POST /runs takes inline).
function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// Starts a run of the question typed (with the files attached), in the conversation once
// there is one; the first run's answer names the conversation, and the page's address follows.
async function ask(state, parts, watch) {
  const text = parts.input.value.trim();
  if (!text) return;
  parts.send.disabled = true;
  parts.error.hidden = true;
  try {
    const files = await Promise.all(state.pending.map(async (file) => ({ inline_data: {
      mime_type: file.type || "application/octet-stream", data: await base64Of(file),
      display_name: file.name } })));
    const body = { text, agent: parts.agent.value || "default", files };
    if (state.conversation) body.conversation_id = state.conversation;
    const started = await api("/runs", { method: "POST", body: JSON.stringify(body),
      headers: { "Content-Type": "application/json", "Idempotency-Key": requestId() } });
    if (!state.conversation) {
      state.conversation = started.conversation_id;
      history.replaceState(null, "", `#/chat/${encodeURIComponent(started.conversation_id)}`);
      showConversation(parts.conversation, state.conversation);
    }
    parts.log.querySelector("li.empty")?.remove();
    watch(started.run_id);
    parts.input.value = "";
    state.pending.length = 0;
    showAttached(parts.attached, state.pending);
  } catch (error) {
    parts.error.textContent = error.status ? error.message : `Could not ask: ${error.message}`;
    parts.error.hidden = false;
  } finally {
    parts.send.disabled = false;
    parts.input.focus();
  }
}

// An idempotency key per question sent: a retried request starts the run once.
function requestId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `ui-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// One question and its answer: the question's text and files, the run's status with a link to
// its page, its decision panels, the text being written, then the answer.
function turnView(runId) {
  const href = `#/runs/${encodeURIComponent(runId)}`;
  const scope = `${runId}-`;
  const parts = {
    question: h("p", { class: "question-text" }),
    files: h("div", { class: "files", hidden: true }),
    status: h("p", { class: "turn-status" }),
    approvals: h("section", { class: "approvals", hidden: true,
      "aria-labelledby": `${scope}approvals` },
    h("h2", { id: `${scope}approvals`, class: "approvals-title" }, "Waiting for your decision")),
    liveLabel: h("p", { class: "visually-hidden", id: `${scope}live`, hidden: true }),
    liveText: h("div", { class: "live-text", "aria-labelledby": `${scope}live` }),
    answer: h("div", { class: "answer" }),
  };
  const el = h("li", { class: "turn", dataset: { runId } },
    h("div", { class: "ask" }, h("span", { class: "who" }, "You"), parts.question, parts.files),
    h("div", { class: "reply" }, h("span", { class: "who" }, "Agent"), parts.status,
      parts.approvals, parts.liveLabel, parts.liveText, parts.answer),
    h("a", { class: "turn-run", href }, "Open the run"));
  const live = liveText(parts.liveLabel, parts.liveText);
  return {
    el,
    live,
    update(run, onDecided) {
      el.dataset.status = run.status;
      el.dataset.conversationId = run.conversation_id;
      parts.question.textContent = run.text;
      const files = questionFiles(run);
      if (files.length && parts.files.hidden) {
        parts.files.replaceChildren(...files.map((file) => fileView(run.run_id, file)));
        parts.files.hidden = false;
      }
      parts.status.replaceChildren(statusBadge(run.status), ` ${run.agent}`,
        run.handed_to ? `, handed to ${run.handed_to}` : "", waitingFor(run));
      if (run.steps) {  // a run's view (a summary has no steps nor waits)
        renderApprovals(runId, run, parts.approvals, onDecided, scope);
        live.committed(run);
      }
      showAnswer(run, parts.answer);
    },
  };
}

function showAnswer(run, box) {
  const stop = run.budget_stop ? `Stopped by its ${run.budget_stop} budget.` : "";
  let text = "";
  if (run.answer) text = run.answer;
  else if (run.output) text = JSON.stringify(run.output, null, 2);
  else if (run.status === "failed") text = `Failed: ${run.error || "no cause recorded"}`;
  else if (run.status === "cancelled") text = "Cancelled.";
  else if (TERMINAL.has(run.status)) text = stop || "No answer.";
  box.textContent = text;
  box.classList.toggle("error", run.status === "failed");
  box.hidden = !text;
}
