// What the pages of background runs (evaluations, batches) share: the list page (a heading, a line
// on what to fill in, a form that starts a run and opens its page, the runs under it) and the state
// badge, and following a run's page.
import { api } from "./api.js";
import { clear, h, notice, table } from "./dom.js";

export const stateBadge = (state) => h("span", { class: `badge ${state === "finished" ? "pass" : state === "interrupted" ? "fail" : ""}` }, state);

// A run's events at PATH/events, replayed then live: `onItem(message)` for each `kind` event; once the
// run is over (`end`) the run is re-read and the page redraws its state with `onEnd(run)`, else says why
// in `problem`. Returns what closes the stream.
export function followRun(path, kind, onItem, onEnd, problem) {
  const source = new EventSource(`${path}/events`);
  source.addEventListener(kind, onItem);
  source.addEventListener("end", async () => {
    source.close();
    try {
      onEnd(await api("GET", path));
    } catch (error) {
      clear(problem, notice(error.message));
    }
  });
  return () => source.close();
}

// `fields`: [id, label, input] of the form; `body()` the POST body from them; runs are at `path`
// (their pages at #PATH/ID), each a row of `heads` by `row(run)`.
export async function renderRuns(view, { title, intro, label, button, fields, body, path, heads, row }) {
  const problem = h("div", { "aria-live": "polite" });
  const list = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const form = h("form", { class: "card toolbar", "aria-label": label }, fields.map(([id, text, input]) => [h("label", { for: id }, text), input]), h("button", { type: "submit" }, button));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const run = await api("POST", path, await body());
      location.hash = `#${path}/${encodeURIComponent(run.id)}`;
    } catch (error) {
      clear(problem, notice(error.message));
    }
  });
  clear(view, h("h1", {}, title), h("p", { class: "muted" }, intro), form, problem, list);
  try {
    const runs = await api("GET", path);
    clear(list, table(title, heads, runs.map(row), "No runs yet."));
  } catch (error) {
    clear(list, notice(error.message));
  }
}
