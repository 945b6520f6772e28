// The inspector's eval pages, over GET /evals and GET /evals/{eval_id}:
//   #/evals        the caller's evals, the latest first: pass rate, score, pass@k, cost
//   #/evals/<id>   one eval: its summary, then its cases, each with its run's link; a failed
//                  case opens on its failed checks (a trajectory's diff coloured line by
//                  line), its answer and its trajectory
// app.js hands each view its helpers (``ui``). Everything a report holds comes from runs and
// datasets, so it is put in the page as text, never as HTML, and a case's run is linked by
// its id, never by the URL the report carries.

const EVALS_REFRESH_MS = 10000;

const pct = (share) => (typeof share === "number" ? `${(share * 100).toFixed(1)}%` : "—");
const score = (value) => (typeof value === "number" ? value.toFixed(3) : "—");
const passedAll = (report) => report.summary.runs > 0
  && report.summary.passed === report.summary.runs;

function verdict(ui, report) {
  return ui.h("span", { class: `badge ${passedAll(report) ? "completed" : "failed"}` },
    passedAll(report) ? "passed" : "failed");
}

// pass@k and pass^k mean something only when each case ran more than once.
function atK(report) {
  const { summary } = report;
  return report.repeat > 1
    ? `${pct(summary.pass_at_k)} / ${pct(summary.pass_all_k)} (k = ${report.repeat})` : "—";
}

// -- the list --------------------------------------------------------------------------------

export function evalListView(ui) {
  const { h } = ui;
  const body = h("tbody");
  const refresh = async () => {
    const { evals } = await ui.api("/evals?limit=50");
    ui.reconcile(body, evals, (report) => report.eval_id, (report) => evalRow(ui, report));
    if (!evals.length) {
      body.append(h("tr", {}, h("td", { colspan: 9, class: "empty" },
        "No evals yet: `ackloop eval` stores its report here.")));
    }
  };
  ui.main.replaceChildren(
    h("h1", {}, "Evals"),
    h("p", { class: "hint" }, "Datasets of cases run as real runs, checked and scored " +
      "(ackloop eval). pass@k: the cases that passed at least once in their k runs; " +
      "pass^k: those that passed every time."),
    h("div", { class: "scroll" },
      h("table", { id: "eval-list" },
        h("caption", { class: "visually-hidden" }, "Your evals, the latest first"),
        h("thead", {}, h("tr", {}, ["Eval", "When", "Target", "Runs", "Pass rate", "Score",
          "pass@k / pass^k", "Cost of runs", "Eval's cost"].map((name) =>
          h("th", { scope: "col" }, name)))),
        body)));
  return ui.every(EVALS_REFRESH_MS, refresh);
}

function evalRow(ui, report) {
  const { h } = ui;
  const { summary } = report;
  const href = `#/evals/${encodeURIComponent(report.eval_id)}`;
  return h("tr", { dataset: { evalId: report.eval_id }, onclick: (event) => {
    if (!event.target.closest("a")) location.hash = href;
  } },
  h("td", { class: "name" }, h("a", { class: "eval-link", href }, report.name), " ",
    verdict(ui, report), h("br"), h("small", { class: "eval-id" }, report.eval_id)),
  h("td", { class: "created" }, ui.when(report.started_at)),
  h("td", { class: "target" }, report.target),
  h("td", { class: "runs" }, `${summary.runs} (${ui.plural(summary.cases, "case")})`),
  h("td", { class: "pass-rate" }, pct(summary.pass_rate)),
  h("td", { class: "score" }, score(summary.score)),
  h("td", { class: "at-k" }, atK(report)),
  h("td", { class: "cost" }, ui.dollars(summary.cost_usd)),
  h("td", { class: "eval-cost" }, ui.dollars(summary.eval_cost_usd)));
}

// -- one eval --------------------------------------------------------------------------------

export function evalView(ui, evalId) {
  const { h } = ui;
  const controller = new AbortController();
  const section = h("section", { id: "eval", "aria-labelledby": "eval-title" },
    h("h1", { id: "eval-title" }, "Eval ", h("code", {}, evalId)));
  ui.main.replaceChildren(h("p", {}, h("a", { href: "#/evals" }, "← All evals")), section);
  ui.attempt(async () => {
    const report = await ui.api(`/evals/${encodeURIComponent(evalId)}`,
      { signal: controller.signal });
    renderEval(ui, report, section);
  });
  return () => controller.abort();
}

function renderEval(ui, report, section) {
  const { h } = ui;
  const { summary } = report;
  section.dataset.evalId = report.eval_id;
  section.dataset.passed = String(passedAll(report));
  const fact = (name, key, value) => [h("dt", {}, name), h("dd", { dataset: { fact: key } },
    value)];
  const failed = report.cases.filter((c) => !c.passed).length;
  section.replaceChildren(
    h("h1", { id: "eval-title" }, report.name, " ", verdict(ui, report)),
    h("p", { class: "hint" }, "Eval ", h("code", {}, report.eval_id)),
    h("dl", { class: "facts", id: "eval-summary" },
      ...fact("Dataset", "dataset", report.dataset || "—"),
      ...fact("Target", "target", report.target || "—"),
      ...fact("Started", "started", `${ui.when(report.started_at)} (took ${
        ui.secs(summary.wall_seconds)})`),
      ...fact("Runs", "runs", `${summary.runs}: ${ui.plural(summary.cases, "case")} × ${
        report.repeat}, ${report.concurrency} at a time`),
      ...fact("Passed", "passed", `${summary.passed} of ${summary.runs}; ${summary.failed
      } failed, ${ui.plural(summary.errors, "error")}`),
      ...fact("Pass rate", "pass_rate", pct(summary.pass_rate)),
      ...fact("Score", "score", score(summary.score)),
      ...fact("pass@k / pass^k", "at_k", atK(report)),
      ...fact("Cost of runs", "cost", `${ui.dollars(summary.cost_usd)}${
        summary.replayed ? ` (${summary.replayed} replayed: no model called)` : ""}`),
      ...fact("Eval's own cost", "eval_cost", `${ui.dollars(summary.eval_cost_usd)} (${
        ui.plural(summary.judge_calls, "judge call")})`),
      ...fact("Calls", "calls", `${ui.plural(summary.model_calls, "model call")}, ${
        ui.plural(summary.tool_calls, "tool call")}`),
      ...fact("Slowest case", "slowest", ui.secs(summary.slowest_case_seconds))),
    h("h2", {}, "Cases"),
    h("p", { class: "hint" }, failed ? `${ui.plural(failed, "run")} did not pass: each ` +
      "opens on its failed checks." : "Every run passed."),
    h("div", { class: "scroll" }, h("table", { id: "eval-cases" },
      h("caption", { class: "visually-hidden" }, "The eval's cases, in the dataset's order"),
      h("thead", {}, h("tr", {}, ["Case", "Result", "Score", "Status", "Model calls",
        "Tool calls", "Time", "Cost", "Run"].map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, report.cases.flatMap((c) => caseRows(ui, report, c))))));
}

function caseRows(ui, report, c) {
  const { h } = ui;
  const result = c.error ? "error" : c.passed ? "passed" : "failed";
  const run = c.run_id
    ? h("a", { class: "case-run", href: `#/runs/${encodeURIComponent(c.run_id)}` },
      h("code", {}, c.run_id))
    : c.replay ? "replayed" : "—";
  const row = h("tr", { class: `case ${result}`,
    dataset: { case: c.name, repetition: c.repetition, result } },
  h("td", { class: "name" }, c.name, report.repeat > 1 ? h("small", {}, ` #${c.repetition}`)
    : ""),
  h("td", {}, h("span", { class: `badge ${result === "passed" ? "completed" : "failed"}` },
    result)),
  h("td", { class: "score" }, score(c.score)),
  h("td", { class: "status" }, c.status || "—"),
  h("td", { class: "calls" }, c.model_calls),
  h("td", { class: "calls" }, c.tool_calls),
  h("td", { class: "time" }, ui.secs(c.wall_seconds)),
  h("td", { class: "cost" }, c.replay ? "replayed" : ui.dollars(c.cost_usd)),
  h("td", { class: "run" }, run));
  const detail = h("tr", { class: "case-detail", dataset: { case: c.name,
    repetition: c.repetition } }, h("td", { colspan: 9 }, caseDetail(ui, c)));
  return [row, detail];
}

// A case's failed checks (each reason as preformatted text), its error, its question, answer
// and trajectory: open when it did not pass.
function caseDetail(ui, c) {
  const { h } = ui;
  const failures = c.checks.filter((check) => check.kind === "assertion" && check.value === false);
  const others = c.checks.filter((check) => !failures.includes(check));
  return h("details", { class: "case-body", open: !c.passed },
    h("summary", {}, c.passed ? "Checks, answer and trajectory"
      : `Why it failed: ${failures.length ? failures.map((f) => f.name).join(", ")
        : c.error ? "an error" : "its checks"}`),
    c.error ? h("p", { class: "error case-error" }, `Error: ${c.error}`) : null,
    failures.length ? h("div", { class: "failures" }, failures.map((check) =>
      h("div", { class: "failure", dataset: { check: check.name } },
        h("h3", {}, check.name, " ", h("small", {}, "failed")),
        check.reason ? reasonText(h, check.reason) : null))) : null,
    others.length ? h("ul", { class: "checks" }, others.map((check) => h("li", {},
      h("code", {}, check.name), `: ${check.kind === "assertion" ? "held"
        : check.kind === "score" ? score(check.value) : check.value}`,
      check.reason ? h("small", {}, ` (${check.reason})`) : ""))) : null,
    c.question ? [h("h3", {}, "Question"), h("p", { class: "question" }, c.question)] : null,
    h("h3", {}, "Answer"),
    h("pre", { class: "answer" }, typeof c.answer === "string" ? c.answer
      : c.answer === null || c.answer === undefined ? "No answer."
        : JSON.stringify(c.answer, null, 2)),
    h("h3", {}, "Trajectory"),
    c.trajectory.length ? h("ol", { class: "trajectory" }, c.trajectory.map((call) =>
      h("li", {}, h("code", {}, call)))) : h("p", { class: "empty" }, "No tool calls."));
}

// A reason as preformatted text; the lines of a trajectory's diff coloured by their mark:
// "  = " the same, "  - " expected and missing, "  + " made but not expected, "  ! " differs.
const DIFF_MARKS = { "=": "same", "-": "removed", "+": "added", "!": "changed" };

function reasonText(h, reason) {
  return h("pre", { class: "reason" }, reason.split("\n").map((line, i, lines) => {
    const mark = /^ {2}([-+=!]) /.exec(line);
    const text = i < lines.length - 1 ? `${line}\n` : line;
    return mark ? h("span", { class: `diff ${DIFF_MARKS[mark[1]]}` }, text) : text;
  }));
}
