// MEMORY.md and USER.md with their limits and threat marks, edited with the memory tool's ops (add,
// replace, remove) and its validation: a refused edit changes nothing and says why. SOUL.md as the
// prompt gets it.
import { api } from "../api.js";
import { clear, h, notice } from "../dom.js";

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

async function render(view, _params, _query, message = "") {
  let memories;
  try {
    memories = await api("GET", "/memory");
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
    h("h2", {}, "SOUL.md"),
    memories.soul
      ? [memories.soul.problems.map((p) => notice(p)), h("pre", { class: "content" }, memories.soul.text)]
      : h("p", { class: "muted" }, "No persona (SOUL.md) in this profile."),
  );
}

export const memoryPage = { pattern: /^\/memory$/, nav: "Memory", href: "#/memory", render };
