// What every view of the run inspector shares: building elements, calling the API with the
// token, refreshing, formatting, and reading a run's event stream. Data goes into the page as
// text, never as HTML.

export const TERMINAL = new Set(["completed", "failed", "cancelled"]);

export const main = document.getElementById("main");
const notice = document.getElementById("notice");

export function h(tag, attrs = {}, ...children) {
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

export function say(message) {
  notice.textContent = message;
  notice.hidden = !message;
}

export class ApiFailure extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function headers(extra = {}) {
  const token = sessionStorage.getItem("ackloop-token");
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

export async function api(path, options = {}) {
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
export async function attempt(work) {
  try {
    await work();
    if (notice.dataset.source === "refresh") say("");
  } catch (error) {
    if (error.name === "AbortError") return;
    notice.dataset.source = "refresh";
    say(error.message);
  }
}

export function every(ms, work) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    await attempt(work);
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

export const when = (seconds) => (seconds ? new Date(seconds * 1000).toLocaleString() : "");
export const secs = (s) => (s === null || s === undefined ? "" : `${Number(s).toFixed(s < 10 ? 2 : 1)} s`);
export const dollars = (usd) => (typeof usd === "number" ? `$${usd.toFixed(usd < 0.01 ? 6 : 4)}` : "—");
export const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// Puts a table's rows in the order of ``items`` while leaving alone every row whose item did
// not change (``signature`` compares them), so a refresh moves neither the keyboard focus, a
// selection nor a click under way. A changed row is built anew; if it held the focus, the
// control of the same kind in its new row takes it.
export function reconcile(body, items, keyOf, build, signature = (item) => JSON.stringify(item)) {
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

export function statusBadge(status) {
  return h("span", { class: `badge ${status}` }, status);
}

// The run's event stream (ndjson, read with fetch so the token is sent): calls onEvent for each.
export async function follow(runId, signal, onEvent) {
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
