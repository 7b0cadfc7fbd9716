// Evaluation runs (the /evals routes): the profile's runs with their progress and scores, a form that
// starts one, and a run's page: its per-task scores and every attempt, streamed as they finish.
import { api } from "../api.js";
import { clear, h, notice, table } from "../dom.js";
import { followRun, renderRuns, stateBadge } from "../run_list.js";

const pct = (x) => (x === null || x === undefined ? "—" : `${Math.round(x * 100)}%`);
const runLink = (run) => h("a", { href: `#/evals/${encodeURIComponent(run.id)}` }, run.id);
const suiteName = (suite) => suite.split("/").pop();

function runRow(run) {
  return h(
    "tr",
    {},
    h("td", {}, runLink(run)),
    h("td", {}, suiteName(run.record.suite)),
    h("td", {}, run.record.agent),
    h("td", {}, stateBadge(run.state)),
    h("td", { class: "num" }, `${run.done} of ${run.total}`),
    h("td", { class: "num" }, pct(run.summary?.overall.pass_at_1)),
    h("td", { class: "num" }, run.summary ? run.summary.overall.mean_reward.toFixed(2) : "—"),
  );
}

function renderList(view) {
  const suite = h("input", { id: "eval-suite", required: true, value: "builtin" });
  const agent = h("select", { id: "eval-agent" }, ["oracle", "nop", "hermetic"].map((a) => h("option", { value: a }, a)));
  const attempts = h("input", { id: "eval-attempts", type: "number", min: 1, max: 20, value: 1 });
  const workers = h("input", { id: "eval-workers", type: "number", min: 1, max: 64, value: 2 });
  return renderRuns(view, {
    title: "Evaluation runs",
    intro: "Suite: builtin, or NAME of a suite in the profile's home at evals/suites/NAME. The oracle agent runs each task's reference solution (it checks the tasks), nop does nothing (it checks the verifiers), hermetic is the agent.",
    label: "Start a run",
    button: "Start run",
    fields: [["eval-suite", "Suite", suite], ["eval-agent", "Agent", agent], ["eval-attempts", "Attempts", attempts], ["eval-workers", "Workers", workers]],
    body: () => ({ suite: suite.value, agent: agent.value, attempts: Number(attempts.value), workers: Number(workers.value) }),
    path: "/evals",
    heads: ["Run", "Suite", "Agent", "State", "Attempts", "pass@1", "Mean reward"],
    row: runRow,
  });
}

function attemptRow(n, r) {
  const session = r.session_id ? h("a", { href: `#/sessions/${encodeURIComponent(r.session_id)}` }, "session") : "";
  return h(
    "tr",
    {},
    h("td", { class: "num" }, n),
    h("td", {}, r.task),
    h("td", { class: "num" }, r.attempt),
    h("td", {}, h("span", { class: `badge ${r.passed ? "pass" : "fail"}` }, r.passed ? "passed" : "failed"), ` reward ${r.reward.toFixed(2)}`),
    h("td", { class: "num" }, `${r.duration_s.toFixed(1)} s`),
    h("td", { class: "num" }, r.tool_calls),
    h("td", {}, r.error ? `${r.error_class || "error"}: ${r.error}` : "", session),
  );
}

function summaryPart(run) {
  const s = run.summary;
  if (!s) return h("p", { class: "muted" }, run.state === "running" ? "Scores come when the run ends." : "No summary: the server stopped during the run (hermetic eval run --resume DIR continues it).");
  const atK = s.k > 1; // pass@k says more than pass@1 only with more attempts per task
  const tasks = Object.entries(s.per_task).map(([task, score]) =>
    h("tr", {}, h("td", {}, task), h("td", { class: "num" }, `${score.passed} of ${score.attempts}`), h("td", { class: "num" }, pct(score.pass_at_1)), atK ? h("td", { class: "num" }, pct(score.pass_at_k)) : null, h("td", { class: "num" }, score.mean_reward.toFixed(2)), h("td", { class: "num" }, score.infrastructure_failures)),
  );
  const heads = ["Task", "Passed", "pass@1", atK ? `pass@${s.k}` : null, "Mean reward", "Infrastructure failures"].filter(Boolean);
  return [
    h("dl", { class: "facts", "aria-label": "Overall scores" }, [["pass@1", pct(s.overall.pass_at_1)], atK ? [`pass@${s.k}`, pct(s.overall.pass_at_k)] : null, ["Mean reward", s.overall.mean_reward.toFixed(2)], ["Tokens", `${s.prompt_tokens.toLocaleString()} in · ${s.completion_tokens.toLocaleString()} out`], ["Tool calls", s.tool_calls]].filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])),
    table("Tasks", heads, tasks, "No task was scored."),
  ];
}

async function renderRun(view, [id]) {
  const path = `/evals/${encodeURIComponent(id)}`;
  let run;
  try {
    run = await api("GET", path);
  } catch (error) {
    clear(view, h("h1", {}, `Run ${id}`), notice(error.message));
    return;
  }
  const progress = h("dd", {}, `${run.done} of ${run.total}`);
  const state = h("dd", {}, stateBadge(run.state));
  const scores = h("section", { "aria-labelledby": "scores-heading" }, h("h2", { id: "scores-heading" }, "Scores"), summaryPart(run));
  const attempts = h("tbody", {});
  const r = run.record;
  clear(
    view,
    h("p", {}, h("a", { href: "#/evals" }, "All runs")),
    h("h1", {}, `Run ${id}`),
    h("dl", { class: "facts" }, [["Suite", r.suite], ["Agent", `${r.agent}${r.model ? ` (${r.model})` : ""}`], ["Attempts per task", r.attempts], ["Learning", r.learning]].map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]), h("dt", {}, "State"), state, h("dt", {}, "Done"), progress),
    scores,
    h("h2", {}, "Attempts"),
    h("table", { class: "list", "aria-label": "Attempts" }, h("thead", {}, h("tr", {}, ["#", "Task", "Attempt", "Result", "Time", "Tool calls", ""].map((t) => h("th", { scope: "col" }, t)))), attempts),
  );
  // Every finished attempt, replayed then live; then the summary.
  let seen = 0;
  return followRun(
    path,
    "attempt",
    (message) => {
      seen += 1;
      attempts.append(attemptRow(Number(message.lastEventId) || seen, JSON.parse(message.data)));
      progress.textContent = `${seen} of ${Math.max(run.total, seen)}`;
    },
    (ended) => {
      clear(state, stateBadge(ended.state));
      progress.textContent = `${ended.done} of ${ended.total}`;
      clear(scores, h("h2", { id: "scores-heading" }, "Scores"), summaryPart(ended));
    },
    scores,
  );
}

export const evalsPage = { pattern: /^\/evals$/, nav: "Evaluations", href: "#/evals", render: renderList };
export const evalPage = { pattern: /^\/evals\/([a-f0-9]{12})$/, nav: "Evaluations", render: renderRun };
