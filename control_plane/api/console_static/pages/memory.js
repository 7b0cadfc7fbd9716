// MEMORY.md and USER.md with their limits and threat marks, edited with the memory tool's ops (add,
// replace, remove) and its validation: a refused edit changes nothing and says why. SOUL.md as the
// prompt gets it, edited whole under the same checks (a refused text stays in the box). The memory
// providers' health: their calls in this server, failures and the last problem.
import { api } from "../api.js";
import { clear, h, notice, table, time } from "../dom.js";

function usage(file) {
  const percent = Math.round((100 * file.chars) / file.limit);
  return h(
    "p",
    {},
    h("meter", { min: 0, max: file.limit, value: file.chars, "aria-label": `${file.file} in use` }),
    ` ${file.chars.toLocaleString()} of ${file.limit.toLocaleString()} characters (${percent}%)`,
  );
}

function memoryFile(file, reload) {
  const status = h("div", { "aria-live": "polite" });
  const edit = async (ops) => {
    try {
      const saved = await api("POST", `/memory/${file.target}`, { ops });
      await reload(saved.message);
    } catch (error) {
      clear(status, notice(error.message));
    }
  };
  const entries = file.entries.map((entry, index) => {
    const text = h("textarea", { rows: 2, "aria-label": `${file.file} entry ${index + 1}` });
    text.value = entry.text;
    return h(
      "li",
      { class: entry.threats.length ? "card withheld" : "card" },
      entry.threats.length ? h("p", { class: "notice error" }, `Withheld from the prompt: ${entry.threats.join("; ")}`) : null,
      text,
      h(
        "div",
        { class: "toolbar" },
        h("button", { type: "button", onclick: () => edit([{ op: "replace", match: entry.text, text: text.value }]) }, "Save"),
        h("button", { type: "button", onclick: () => edit([{ op: "remove", match: entry.text }]) }, "Remove"),
      ),
    );
  });
  const fresh = h("textarea", { id: `add-${file.target}`, rows: 3 });
  const add = h(
    "form",
    { class: "card" },
    h("label", { for: `add-${file.target}` }, `New entry for ${file.file}`),
    fresh,
    h("button", { type: "submit" }, "Add entry"),
  );
  add.addEventListener("submit", (event) => {
    event.preventDefault();
    edit([{ op: "add", text: fresh.value }]);
  });
  return h(
    "section",
    { "aria-labelledby": `h-${file.target}` },
    h("h2", { id: `h-${file.target}` }, file.file),
    usage(file),
    entries.length ? h("ol", { class: "plain" }, entries) : h("p", { class: "muted" }, "No entries yet."),
    add,
    status,
  );
}

function soulFile(soul, limit, reload) {
  const status = h("div", { "aria-live": "polite" });
  const text = h("textarea", { id: "soul-text", rows: 10, maxlength: 16 * limit });
  text.value = soul ? soul.raw : "";
  const form = h(
    "form",
    { class: "card" },
    h("label", { for: "soul-text" }, "SOUL.md (empty: no persona)"),
    text,
    h("button", { type: "submit" }, "Save SOUL.md"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const saved = await api("PUT", "/memory/soul", { text: text.value });
      await reload(saved.message);
    } catch (error) {
      clear(status, notice(error.message));
    }
  });
  const chars = soul ? soul.raw.length : 0;
  return h(
    "section",
    { "aria-labelledby": "h-soul" },
    h("h2", { id: "h-soul" }, "SOUL.md"),
    usage({ file: "SOUL.md", chars, limit }),
    soul ? soul.problems.map((p) => notice(p)) : null,
    soul
      ? h("details", {}, h("summary", {}, "As the prompt gets it"), h("pre", { class: "content" }, soul.text))
      : h("p", { class: "muted" }, "No persona (SOUL.md) in this profile."),
    form,
    status,
  );
}

function providersPart(providers) {
  const rows = providers.map((p) =>
    h(
      "tr",
      {},
      h("td", {}, p.name),
      h("td", { class: "num" }, `${p.calls} (${p.failures} failed)`),
      h("td", {}, p.last_ok_at ? time(p.last_ok_at) : "never"),
      h("td", {}, p.last_problem ? [time(p.last_problem_at), " ", h("span", { class: "failed" }, p.last_problem)] : "—"),
      h("td", { class: "num" }, `${p.timeout} s`),
    ),
  );
  return h(
    "section",
    { "aria-labelledby": "h-providers" },
    h("h2", { id: "h-providers" }, "Memory providers"),
    h("p", { class: "muted" }, "Outside memory consulted at each turn's start, told after memory writes and at a session's end (memory.providers). Calls counted in this server since it started; a failed call is skipped and the turn goes on."),
    table("Memory providers", ["Provider", "Calls", "Last answer", "Last problem", "Timeout"], rows, "No memory provider is configured."),
  );
}

async function render(view, _params, _query, message = "") {
  let memories, providers;
  try {
    [memories, providers] = await Promise.all([api("GET", "/memory"), api("GET", "/memory/providers")]);
  } catch (error) {
    clear(view, h("h1", {}, "Memory"), notice(error.message));
    return;
  }
  const reload = (text) => render(view, _params, _query, text);
  clear(
    view,
    h("h1", {}, "Memory"),
    message ? notice(message, "ok") : null,
    memories.files.map((file) => memoryFile(file, reload)),
    soulFile(memories.soul, memories.soul_limit, reload),
    providersPart(providers),
  );
}

export const memoryPage = { pattern: /^\/memory$/, nav: "Memory", href: "#/memory", render };
