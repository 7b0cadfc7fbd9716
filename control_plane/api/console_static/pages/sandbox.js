// A session's sandbox: what it costs now, its exposed ports and egress (sandbox_state.js), and its
// files (browse directories, download a file, upload into the directory shown).
// #/sessions/ID/sandbox?path=DIR is a link to one directory.
import { api } from "../api.js";
import { clear, h, notice } from "../dom.js";
import { sandboxState } from "../sandbox_state.js";

function parentOf(path) {
  const parts = path.split("/").filter(Boolean);
  parts.pop();
  return parts.length ? parts.join("/") : ".";
}

async function render(view, [sessionId], query) {
  const path = query.get("path") || ".";
  const base = `/sessions/${encodeURIComponent(sessionId)}`;
  const here = (dir) => `#/sessions/${encodeURIComponent(sessionId)}/sandbox?path=${encodeURIComponent(dir)}`;
  const join = (name) => (path === "." ? name : `${path.replace(/\/$/, "")}/${name}`);
  const status = h("div", { "aria-live": "polite" });
  const state = sandboxState(sessionId);
  const body = h("div", {}, h("p", { class: "muted" }, "Opening the sandbox…"));
  const picker = h("input", { id: "upload", type: "file", required: true });
  const upload = h("form", { class: "card toolbar" }, h("label", { for: "upload" }, `Upload into ${path}`), picker, h("button", { type: "submit" }, "Upload"));
  clear(
    view,
    h("p", {}, h("a", { href: `#/sessions/${encodeURIComponent(sessionId)}` }, "← Session"), " · ", h("a", { href: `#/sessions/${encodeURIComponent(sessionId)}/terminal` }, "Terminal")),
    h("h1", {}, "Sandbox"),
    state.section,
    h("h2", {}, "Files"),
    upload,
    status,
    body,
  );
  const list = async () => {
    const listing = await api("GET", `${base}/files?path=${encodeURIComponent(path)}`);
    const rows = listing.entries.map((entry) => {
      const target = join(entry.name);
      const link =
        entry.type === "dir"
          ? h("a", { href: here(target) }, `${entry.name}/`)
          : h("a", { href: `${base}/files/download?path=${encodeURIComponent(target)}`, download: entry.name }, entry.name);
      return h("tr", {}, h("td", {}, link), h("td", {}, entry.type), h("td", { class: "num" }, entry.type === "file" ? entry.size.toLocaleString() : ""));
    });
    clear(
      body,
      h("p", {}, h("code", {}, listing.path), path !== "." ? [" · ", h("a", { href: here(parentOf(path)) }, "up")] : null),
      h(
        "table",
        { class: "list" },
        h("thead", {}, h("tr", {}, ["Name", "Type", "Bytes"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 3 }, "Empty directory."))),
      ),
      listing.truncated ? notice("Only the first entries are shown.", "ok") : null,
    );
  };
  upload.addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = new FormData();
    form.append("file", picker.files[0]);
    try {
      const saved = await api("POST", `${base}/files?path=${encodeURIComponent(path)}`, form);
      clear(status, notice(`Uploaded ${saved.name} (${saved.size.toLocaleString()} bytes).`, "ok"));
      upload.reset();
      await list();
    } catch (error) {
      clear(status, notice(error.message));
    }
  });
  try {
    await list();
  } catch (error) {
    clear(body, notice(error.message));
  }
  state.start(); // after the listing, which starts the sandbox
  return state.stop;
}

export const sandboxPage = { pattern: /^\/sessions\/([^/?]+)\/sandbox$/, nav: "Sessions", render };
