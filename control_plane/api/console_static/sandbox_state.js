// The sandbox page's live state: what the sandbox costs now (read again every few seconds while the
// page is open), its exposed ports as links, and its egress proxy's decisions (the audit log).
import { api } from "./api.js";
import { clear, h, notice, table, time } from "./dom.js";

const EVERY_MS = 3000;
const size = (n) => (n === null || n === undefined ? "—" : n > 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${Math.round(n / 1e3)} kB`);

function statsList(stats) {
  const facts = [
    ["CPU", `${stats.cpu_seconds.toFixed(2)} s${stats.cpu_percent === null ? "" : ` · ${stats.cpu_percent.toFixed(1)} % of a core`}`],
    ["Memory", `${size(stats.memory_bytes)} (peak ${size(stats.memory_peak_bytes)}, limit ${size(stats.memory_limit_bytes)})`],
    ["Processes", `${stats.pids}${stats.pids_limit ? ` of ${stats.pids_limit}` : ""}`],
    ["Workspace", size(stats.disk_bytes)],
    ["Egress", `${size(stats.egress_bytes_up)} up · ${size(stats.egress_bytes_down)} down`],
    ["Limits hit", `${stats.oom_kills} out-of-memory kills · ${stats.pids_max_hits} forks refused`],
  ];
  return h("dl", { class: "facts", "aria-label": "Sandbox stats" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function decision(d) {
  const verdict = d.allowed ? h("span", { class: "ok" }, "allowed") : h("span", { class: "failed" }, `denied (${d.denied})`);
  return h(
    "tr",
    {},
    h("td", {}, time(d.time)),
    h("td", {}, `${d.host ?? "?"}:${d.port ?? "?"}`),
    h("td", {}, verdict, d.reason ? ` ${d.reason}` : ""),
    h("td", { class: "num" }, size(d.bytes_up)),
    h("td", { class: "num" }, size(d.bytes_down)),
  );
}

export function sandboxState(sessionId) {
  const session = encodeURIComponent(sessionId);
  const stats = h("div", {}, h("p", { class: "muted" }, "Reading the sandbox…"));
  const ports = h("div", {});
  const audit = h("div", {});
  const section = h("section", { class: "card", "aria-label": "The sandbox now" }, h("h2", {}, "The sandbox now"), stats, h("h3", {}, "Exposed ports"), ports, h("h3", {}, "Egress"), audit);
  let timer = null;

  const refresh = async () => {
    const held = (await api("GET", "/sandboxes")).find((s) => s.session_id === sessionId);
    if (!held) {
      clear(stats, h("p", { class: "muted" }, "This session holds no sandbox now."));
      clear(ports);
      clear(audit);
      return;
    }
    const [exposed, decisions] = await Promise.all([
      api("GET", `/sessions/${session}/exposures`),
      api("GET", `/sandboxes/${encodeURIComponent(held.sandbox_id)}/audit?limit=50`),
    ]);
    clear(
      stats,
      h("p", {}, h("code", {}, held.sandbox_id), ` on ${held.backend}`, held.stats ? [" · read ", time(held.stats.at)] : ""),
      held.stats ? statsList(held.stats) : h("p", { class: "muted" }, "No reading now (the sandbox is being recreated)."),
    );
    clear(
      ports,
      exposed.length
        ? h("ul", { class: "plain" }, exposed.map((e) => h("li", {}, `port ${e.port}: `, h("a", { href: e.url, target: "_blank", rel: "noopener noreferrer" }, e.url))))
        : h("p", { class: "muted" }, "No port exposed (the agent's expose_port, or POST /sessions/ID/exposures)."),
    );
    clear(audit, table("Egress decisions", ["Time", "Host:port", "Decision", "Up", "Down"], decisions.map(decision), "No connection out: the sandbox never used the network, or is not on network: allowlist."));
  };
  const tick = () =>
    refresh()
      .catch((error) => clear(stats, notice(error.message)))
      .finally(() => {
        if (section.isConnected) timer = setTimeout(tick, EVERY_MS);
      });
  return { section, start: tick, stop: () => clearTimeout(timer) };
}
