// The console's shell: sign-in state, the navigation built from the page list, and hash routes
// (#/sessions/ID is a deep link that works before sign-in too: it is shown right after).
import { api, signedIn, whenSignedOut } from "./api.js";
import { clear, h } from "./dom.js";
import { PAGES } from "./pages/index.js";
import { renderSignIn } from "./pages/signin.js";

const view = document.getElementById("view");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const logout = document.getElementById("logout");
let me = null;
let leave = null;

function route() {
  const raw = location.hash.replace(/^#/, "") || "/sessions";
  const [path, search] = raw.split("?");
  return { path, query: new URLSearchParams(search || "") };
}

// Each render gets a fresh element: a page still awaiting the server when the user moves on (or
// is signed out) writes into its own detached element, never over the page shown now.
function fresh() {
  const el = h("div", { class: "page" });
  view.replaceChildren(el);
  return el;
}

async function show() {
  if (leave) leave();
  leave = null;
  who.textContent = me ? `profile ${me.profile}` : "";
  logout.hidden = !me;
  nav.hidden = !me;
  if (!me) {
    renderSignIn(fresh(), (signin) => setMe(signin));
    return;
  }
  const { path, query } = route();
  for (const page of PAGES) {
    const match = page.pattern.exec(path);
    if (!match) continue;
    for (const link of nav.querySelectorAll("a")) {
      link.toggleAttribute("aria-current", link.dataset.page === page.nav);
    }
    document.title = `${page.nav} · Hermetic console`;
    const el = fresh();
    const cleanup = (await page.render(el, match.slice(1).map(decodeURIComponent), query)) || null;
    if (el.isConnected) leave = cleanup;
    else if (cleanup) cleanup();
    return;
  }
  clear(fresh(), h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/sessions" }, "Back to the sessions")));
}

function setMe(signin) {
  me = signin;
  signedIn(signin);
  show();
}

function theme(next) {
  document.documentElement.dataset.theme = next;
  localStorage.setItem("hermetic-theme", next);
}

for (const page of PAGES) {
  if (page.href) nav.append(h("a", { href: page.href, "data-page": page.nav }, page.nav));
}
const saved = localStorage.getItem("hermetic-theme");
if (saved) document.documentElement.dataset.theme = saved;
document.getElementById("theme").addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  theme(dark ? "light" : "dark");
});
logout.addEventListener("click", async () => {
  try {
    await api("POST", "/auth/logout");
  } finally {
    setMe(null);
  }
});
whenSignedOut(() => setMe(null));
window.addEventListener("hashchange", show);

api("GET", "/auth/session").then(setMe, () => setMe(null));
