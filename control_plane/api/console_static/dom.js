// Building the page from data: every string goes in as text (textContent), never as HTML, so a
// session title, a tool's output or a skill's description cannot become markup or script.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const stamp = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

// A time from the API (seconds since the epoch) in the browser's own zone, machine-readable too.
export function time(seconds) {
  if (!seconds) return "";
  const date = new Date(seconds * 1000);
  return h("time", { datetime: date.toISOString() }, stamp.format(date));
}

export function tokens(prompt, completion, cost) {
  const parts = [`${(prompt || 0).toLocaleString()} in`, `${(completion || 0).toLocaleString()} out`];
  if (cost) parts.push(`$${cost.toFixed(4)}`);
  return parts.join(" · ");
}

// A labelled table of `rows` (tr elements) under `heads`, or one row saying `empty`.
export function table(label, heads, rows, empty) {
  return h(
    "table",
    { class: "list", "aria-label": label },
    h("thead", {}, h("tr", {}, heads.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: heads.length }, empty))),
  );
}

export function notice(text, kind = "error") {
  return h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}
