// The run inspector: views over the HTTP API, chosen by the URL's hash.
//   #/                       the caller's runs, filterable, child runs under their parents
//                            (runs.js)
//   #/runs/<run_id>          one run (run.js)
//   #/chat, #/chat/<id>      a conversation with an agent: ask, follow, decide (chat.js)
//   #/dead-letters           dead letters (with redrive) and poison, for operators (letters.js)
//   #/evals, #/evals/<id>    eval reports and one eval's cases (evals.js)
//   #/schedules              the schedules: next and last firings, pause, resume, trigger
//                            (schedules.js)
// Everything is read with fetch so the bearer token (kept in sessionStorage) goes with it
// (ui.js); data is put in the page as text, never as HTML.

import { chatView } from "./chat.js";
import { evalListView, evalView } from "./evals.js";
import { deadLettersView } from "./letters.js";
import { runView } from "./run.js";
import { runListView } from "./runs.js";
import { schedulesView } from "./schedules.js";
import * as ui from "./ui.js";

const tokenInput = document.getElementById("token");

// What the current view started (timers, streams); stopped when the view changes.
let stopView = () => {};

function route() {
  stopView();
  ui.say("");
  const hash = location.hash || "#/";
  const run = hash.match(/^#\/runs\/(.+)$/);
  const chat = hash.match(/^#\/chat(?:\/(.+))?$/);
  const evaluation = hash.match(/^#\/evals\/(.+)$/);
  if (run) stopView = runView(decodeURIComponent(run[1]));
  else if (chat) stopView = chatView(chat[1] ? decodeURIComponent(chat[1]) : null);
  else if (evaluation) stopView = evalView(ui, decodeURIComponent(evaluation[1]));
  else if (hash === "#/evals") stopView = evalListView(ui);
  else if (hash === "#/schedules") stopView = schedulesView();
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
