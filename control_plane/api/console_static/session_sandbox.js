// A session's sandbox state on its page: checkpoints (roll back to one), a snapshot of the running
// sandbox, and a fork (a new session with this one's history and a copy of its sandbox).
import { api } from "./api.js";
import { clear, h, notice, time } from "./dom.js";

const bytes = (n) => (n > 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${Math.round(n / 1e3)} kB`);

export function sandboxSection(sessionId) {
  const base = `/sessions/${encodeURIComponent(sessionId)}`;
  const status = h("div", { "aria-live": "polite" });
  const list = h("ol", { class: "plain", "aria-label": "Checkpoints" });
  const say = (text, kind = "ok") => clear(status, notice(text, kind));
  const failed = (error) => say(error.message, "error");

  const refresh = async () => {
    const checkpoints = await api("GET", `${base}/checkpoints`);
    clear(
      list,
      checkpoints.length
        ? checkpoints.map((c) =>
            h(
              "li",
              {},
              `Checkpoint ${c.n} `,
              time(c.created),
              ` · before ${c.meta.tool || "a tool call"} · ${bytes(c.bytes)} `,
              h("button", { type: "button", onclick: () => rollback(c.n) }, `Roll back to checkpoint ${c.n}`),
            ),
          )
        : h("li", { class: "muted" }, "No checkpoints yet: one is taken before a turn's first tool call that writes."),
    );
  };
  const rollback = (n) =>
    api("POST", `${base}/rollback`, { n }).then((done) => say(`Rolled back to checkpoint ${n} (${done.applied}).`), failed);
  const snapshot = () =>
    api("POST", `${base}/snapshot`, { label: null }).then((snap) => say(`Snapshot ${snap.id} taken (${bytes(snap.bytes)}).`), failed);
  const fork = () =>
    api("POST", `${base}/fork`).then((record) => {
      location.hash = `#/sessions/${encodeURIComponent(record.id)}`;
    }, failed);

  const section = h(
    "details",
    { class: "card sandbox" },
    h("summary", {}, "Sandbox and checkpoints"),
    h(
      "div",
      { class: "toolbar" },
      h("button", { type: "button", onclick: snapshot }, "Snapshot the sandbox"),
      h("button", { type: "button", onclick: fork }, "Fork this session"),
      h("a", { href: `#/sessions/${encodeURIComponent(sessionId)}/sandbox` }, "Files in the sandbox"),
      h("a", { href: `#/sessions/${encodeURIComponent(sessionId)}/terminal` }, "Terminal"),
    ),
    list,
    status,
  );
  section.addEventListener("toggle", () => section.open && refresh().catch(failed));
  return { section, refresh };
}
