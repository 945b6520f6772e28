// Dead letters (with redrive) and poison, for operators (#/dead-letters).

import { api, attempt, every, h, main, reconcile, when } from "./ui.js";

const LETTERS_REFRESH_MS = 5000;

export function deadLettersView() {
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
