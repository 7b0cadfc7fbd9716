// Batch runs (the /batches routes): the profile's runs with their progress, a form that starts one from
// prompts typed one per line or a prompts file, and a run's page: every prompt with its status, answer
// and session, updated as each one ends.
import { api } from "../api.js";
import { clear, h, notice, table, time, tokens } from "../dom.js";
import { followRun, renderRuns, stateBadge } from "../run_list.js";

const runLink = (run) => h("a", { href: `#/batches/${encodeURIComponent(run.id)}` }, run.id);
const statusBadge = (status) => h("span", { class: `badge ${status === "completed" ? "pass" : status === "pending" ? "" : "fail"}` }, status);
const failed = (statuses) => Object.entries(statuses).reduce((n, [status, count]) => n + (status === "completed" ? 0 : count), 0);

function runRow(run) {
  return h(
    "tr",
    {},
    h("td", {}, runLink(run)),
    h("td", {}, time(run.record.created)),
    h("td", {}, stateBadge(run.state)),
    h("td", { class: "num" }, `${run.done} of ${run.total}`),
    h("td", { class: "num" }, run.statuses.completed || 0),
    h("td", { class: "num" }, failed(run.statuses)),
  );
}

function renderList(view) {
  const lines = h("textarea", { id: "batch-prompts", rows: 4, placeholder: "One prompt per line" });
  const file = h("input", { id: "batch-file", type: "file", accept: ".jsonl,.json,.txt" });
  const workers = h("input", { id: "batch-workers", type: "number", min: 1, max: 64, value: 2 });
  const timeout = h("input", { id: "batch-timeout", type: "number", min: 1, value: 600 });
  const body = async () => {
    const sent = { workers: Number(workers.value), timeout: Number(timeout.value) };
    if (file.files.length) sent.prompts_file = await file.files[0].text();
    else sent.prompts = lines.value.split("\n").filter((line) => line.trim()).map((prompt) => ({ prompt }));
    return sent;
  };
  return renderRuns(view, {
    title: "Batch runs",
    intro: "Each prompt runs in a session of its own (source batch) with its own sandbox, as hermetic batch run does. A prompts file has one JSON line per prompt: {\"prompt\": ..., \"id\", \"category\", \"toolsets\"}.",
    label: "Start a batch",
    button: "Start batch",
    fields: [["batch-prompts", "Prompts", lines], ["batch-file", "Or a prompts file (JSON lines)", file], ["batch-workers", "Workers", workers], ["batch-timeout", "Seconds per prompt", timeout]],
    body,
    path: "/batches",
    heads: ["Run", "Started", "State", "Done", "Completed", "Failed"],
    row: runRow,
  });
}

// A prompt's row: pending until its result arrives, then its status, answer, counts and session.
function promptRow(n, item) {
  const cells = { status: h("td", {}, statusBadge("pending")), answer: h("td", {}), calls: h("td", { class: "num" }), took: h("td", { class: "num" }), session: h("td", {}) };
  const row = h("tr", {}, h("td", { class: "num" }, n), h("th", { scope: "row" }, item.id), h("td", {}, item.prompt), cells.status, cells.answer, cells.calls, cells.took, cells.session);
  row.done = (r) => {
    clear(cells.status, statusBadge(r.status));
    clear(cells.answer, r.final || "", r.error ? h("p", { class: "muted" }, r.error) : null);
    cells.calls.textContent = r.tool_calls;
    cells.took.textContent = `${r.duration_s.toFixed(1)} s`;
    clear(cells.session, r.session_id ? h("a", { href: `#/sessions/${encodeURIComponent(r.session_id)}` }, "session") : "");
  };
  return row;
}

function summaryPart(run) {
  const s = run.summary;
  if (!s) return h("p", { class: "muted" }, run.state === "running" ? "The summary comes when the run ends." : "No summary: the server stopped during the run (hermetic batch run --resume with its prompts.jsonl and --out its directory continues it).");
  const statuses = Object.entries(s.statuses).map(([status, n]) => `${status} ${n}`).join(", ") || "nothing ran";
  return h("dl", { class: "facts", "aria-label": "Results" }, [["Results", statuses], ["Tool calls", s.tool_calls], ["Tokens", tokens(s.prompt_tokens, s.completion_tokens)], ["Time", `${s.seconds.toFixed(1)} s`]].map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]));
}

async function renderRun(view, [id]) {
  const path = `/batches/${encodeURIComponent(id)}`;
  let run, items;
  try {
    [run, items] = await Promise.all([api("GET", path), api("GET", `${path}/prompts`)]);
  } catch (error) {
    clear(view, h("h1", {}, `Batch ${id}`), notice(error.message));
    return;
  }
  const bar = h("progress", { max: run.total, value: 0, "aria-label": "Prompts done" });
  const counted = h("span", {});
  const state = h("dd", {}, stateBadge(run.state));
  const summary = h("section", { "aria-labelledby": "summary-heading" }, h("h2", { id: "summary-heading" }, "Summary"), summaryPart(run));
  const rows = new Map(items.map((item, i) => [item.id, promptRow(i + 1, item)]));
  const r = run.record;
  clear(
    view,
    h("p", {}, h("a", { href: "#/batches" }, "All batches")),
    h("h1", {}, `Batch ${id}`),
    h("dl", { class: "facts" }, [["Started", time(r.created)], ["Workers", r.workers], ["Seconds per prompt", r.timeout], ["Model calls per prompt", r.max_iterations || "the profile's limit"]].map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]), h("dt", {}, "State"), state, h("dt", {}, "Done"), h("dd", {}, bar, " ", counted)),
    summary,
    table("Prompts", ["#", "Id", "Prompt", "Status", "Answer", "Tool calls", "Time", ""], [...rows.values()], "No prompts."),
  );
  let seen = 0;
  const count = () => {
    bar.value = seen;
    counted.textContent = `${seen} of ${run.total}`;
  };
  count();
  // Every finished prompt, replayed then live; then the run's status.
  return followRun(
    path,
    "result",
    (message) => {
      const result = JSON.parse(message.data);
      rows.get(result.id)?.done(result);
      seen += 1;
      count();
    },
    (ended) => {
      clear(state, stateBadge(ended.state));
      clear(summary, h("h2", { id: "summary-heading" }, "Summary"), summaryPart(ended));
    },
    summary,
  );
}

export const batchesPage = { pattern: /^\/batches$/, nav: "Batches", href: "#/batches", render: renderList };
export const batchPage = { pattern: /^\/batches\/([a-f0-9]{12})$/, nav: "Batches", render: renderRun };
