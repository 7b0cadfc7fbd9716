// Health, the profile's settings and its limits as /health reports them to a signed-in caller.
import { api } from "../api.js";
import { clear, h, notice, table } from "../dom.js";

async function render(view) {
  clear(view, h("h1", {}, "Settings and health"));
  try {
    const health = await api("GET", "/health");
    const profile = health.profile || {};
    const memory = Object.entries(profile.memory_percent || {}).map(([file, pct]) => `${file} ${pct === null ? "?" : Math.round(pct)}%`);
    view.append(
      h(
        "dl",
        { class: "facts" },
        [["Server", `${health.status} · Hermetic ${health.version}`], ["Profile", profile.profile], ["Model", profile.model], ["Backend", profile.backend], ["Memory in use", memory.join(", ")], ["Skills", profile.skills]].map(([t, v]) => [h("dt", {}, t), h("dd", {}, String(v ?? "—"))]),
      ),
    );
    const limits = Object.entries(profile.limits || {}).map(([name, value]) => h("tr", {}, [h("td", {}, h("code", {}, name)), h("td", {}, String(value ?? "none"))]));
    view.append(h("h2", {}, "Limits"), table("Limits", ["Setting", "Value"], limits, "No limits reported."));
  } catch (error) {
    view.append(notice(error.message));
  }
}

export const settingsPage = { pattern: /^\/settings$/, nav: "Settings", href: "#/settings", render };
