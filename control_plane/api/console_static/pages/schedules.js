// Cron jobs: add, pause or resume, run now, and each job's run history (newest first).
import { api } from "../api.js";
import { clear, h, notice, time } from "../dom.js";

const jobPath = (job) => `/cron/jobs/${encodeURIComponent(job.id)}`;

function history(job) {
  const list = h("div", { class: "history" });
  const details = h("details", {}, h("summary", {}, "History"), list);
  details.addEventListener("toggle", async () => {
    if (!details.open) return;
    try {
      const runs = await api("GET", `${jobPath(job)}/history?limit=20`);
      clear(
        list,
        runs.length
          ? h("ol", { class: "plain" }, runs.map((run) => h("li", {}, time(run.started_at), ` ${run.status}`, run.session_id ? [" · ", h("a", { href: `#/sessions/${encodeURIComponent(run.session_id)}` }, "session")] : "", run.error ? h("pre", {}, run.error) : null)))
          : h("p", { class: "muted" }, "No runs yet."),
      );
    } catch (error) {
      clear(list, notice(error.message));
    }
  });
  return details;
}

function jobRow(job, refresh, problem) {
  const act = (path) => async () => {
    try {
      await api("POST", `${jobPath(job)}/${path}`);
      await refresh();
    } catch (error) {
      clear(problem, notice(error.message));
    }
  };
  return h(
    "tr",
    {},
    h("td", {}, job.name, h("div", { class: "muted" }, job.prompt.length > 120 ? `${job.prompt.slice(0, 120)}…` : job.prompt)),
    h("td", {}, h("code", {}, job.schedule)),
    h("td", {}, job.paused ? "paused" : "active"),
    h("td", {}, job.next_run_at && !job.paused ? time(job.next_run_at) : "—"),
    h("td", {}, job.last_run_at ? [time(job.last_run_at), ` ${job.last_status || ""}`] : "never"),
    h(
      "td",
      { class: "actions" },
      job.paused
        ? h("button", { type: "button", onclick: act("resume"), "aria-label": `Resume ${job.name}` }, "Resume")
        : h("button", { type: "button", onclick: act("pause"), "aria-label": `Pause ${job.name}` }, "Pause"),
      h("button", { type: "button", onclick: act("run"), "aria-label": `Run ${job.name} now` }, "Run now"),
      history(job),
    ),
  );
}

async function render(view) {
  const problem = h("div", { "aria-live": "polite" });
  const rows = h("tbody", {});
  const refresh = async () => {
    const jobs = await api("GET", "/cron/jobs");
    clear(rows, jobs.length ? jobs.map((job) => jobRow(job, refresh, problem)) : h("tr", {}, h("td", { colspan: 6 }, "No jobs yet.")));
  };
  const schedule = h("input", { id: "cron-schedule", required: true, placeholder: "every 1h, 0 9 * * 1-5, 30m" });
  const prompt = h("input", { id: "cron-prompt", required: true });
  const name = h("input", { id: "cron-name" });
  const form = h(
    "form",
    { class: "card toolbar", "aria-label": "Add a job" },
    h("label", { for: "cron-name" }, "Name"), name,
    h("label", { for: "cron-schedule" }, "Schedule"), schedule,
    h("label", { for: "cron-prompt" }, "Prompt"), prompt,
    h("button", { type: "submit" }, "Add job"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api("POST", "/cron/jobs", { schedule: schedule.value, prompt: prompt.value, name: name.value || null });
      form.reset();
      clear(problem);
      await refresh();
    } catch (error) {
      clear(problem, notice(error.message));
    }
  });
  clear(
    view,
    h("h1", {}, "Schedules"),
    form,
    problem,
    h("table", { class: "list" }, h("thead", {}, h("tr", {}, ["Job", "Schedule", "State", "Next run", "Last run", ""].map((t) => h("th", { scope: "col" }, t)))), rows),
  );
  try {
    await refresh();
  } catch (error) {
    clear(problem, notice(error.message));
  }
}

export const schedulesPage = { pattern: /^\/schedules$/, nav: "Schedules", href: "#/schedules", render };
