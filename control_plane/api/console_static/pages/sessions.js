// The sessions: newest activity first (a page at a time), or the best matches of a search.
import { api } from "../api.js";
import { append, clear, h, notice, time, tokens } from "../dom.js";

const PAGE = 100;
// keyword: the words themselves (the default here: a search box narrows a list); hybrid and semantic
// also bring the sessions nearest in meaning (docs/recall-and-providers.md).
const MODES = ["keyword", "hybrid", "semantic"];

function status(session) {
  return session.ended_at ? "ended" : "open";
}

function row(session) {
  return h(
    "tr",
    {},
    h("td", {}, h("a", { href: `#/sessions/${encodeURIComponent(session.id)}` }, session.title || session.id)),
    h("td", {}, h("span", { class: "badge" }, session.source)),
    h("td", {}, status(session)),
    h("td", { class: "num" }, session.message_count),
    h("td", {}, tokens(session.prompt_tokens, session.completion_tokens, session.cost)),
    h("td", {}, time(session.updated_at)),
  );
}

// A search snippet marks its matched terms >>>like this<<<: shown as <mark>, as text.
function snippet(text) {
  return text.split(/(>>>.*?<<<)/).map((part) =>
    part.startsWith(">>>") && part.endsWith("<<<") ? h("mark", {}, part.slice(3, -3)) : part,
  );
}

function hit(recall) {
  return h(
    "li",
    { class: "card" },
    h("a", { href: `#/sessions/${encodeURIComponent(recall.session_id)}` }, recall.session_title || recall.session_id),
    " ",
    time(recall.created_at),
    h("p", {}, snippet(recall.snippet)),
  );
}

async function render(view, _params, query) {
  const q = query.get("q") || "";
  const mode = MODES.includes(query.get("mode")) ? query.get("mode") : "keyword";
  const search = h("input", { id: "q", name: "q", type: "search", value: q });
  const modes = h("select", { id: "mode", name: "mode" }, MODES.map((m) => h("option", { value: m }, m)));
  modes.value = mode;
  const form = h(
    "form",
    { class: "toolbar", role: "search" },
    h("label", { for: "q" }, "Search sessions"),
    search,
    h("label", { for: "mode" }, "Match"),
    modes,
    h("button", { type: "submit" }, "Search"),
    h("button", { type: "button", onclick: newChat }, "New chat"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = search.value.trim();
    location.hash = text ? `#/sessions?q=${encodeURIComponent(text)}&mode=${modes.value}` : "#/sessions";
  });
  const body = h("div", { id: "sessions" });
  clear(view, h("h1", {}, "Sessions"), form, body);
  try {
    if (q) await renderSearch(body, q, mode);
    else await renderList(body);
  } catch (error) {
    clear(body, notice(error.message));
  }
}

async function renderSearch(body, q, mode) {
  const hits = await api("GET", `/sessions/search?q=${encodeURIComponent(q)}&mode=${mode}&limit=50`);
  clear(body, hits.length ? h("ul", { class: "plain" }, hits.map(hit)) : h("p", {}, "No session matches."));
}

async function renderList(body) {
  const rows = h("tbody", {});
  const more = h("button", { type: "button" }, "Show more");
  let offset = 0;
  const load = async () => {
    const sessions = await api("GET", `/sessions?limit=${PAGE}&offset=${offset}`);
    offset += sessions.length;
    append(rows, sessions.map(row));
    more.hidden = sessions.length < PAGE;
    return sessions.length;
  };
  more.addEventListener("click", () => load().catch((error) => more.replaceWith(notice(error.message))));
  const table = h(
    "table",
    { class: "list" },
    h("caption", { class: "sr-only" }, "Sessions, most recent activity first"),
    h("thead", {}, h("tr", {}, ["Title", "Source", "Status", "Messages", "Tokens", "Last activity"].map((t) => h("th", { scope: "col" }, t)))),
    rows,
  );
  clear(body, table, more);
  if (!(await load())) clear(body, h("p", {}, "No sessions yet: start one with New chat."));
}

async function newChat() {
  const session = await api("POST", "/sessions", { title: null });
  location.hash = `#/sessions/${encodeURIComponent(session.id)}`;
}

export const sessionsPage = { pattern: /^\/sessions$/, nav: "Sessions", href: "#/sessions", render };
