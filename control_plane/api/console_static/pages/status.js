// Health: what `hermetic doctor` finds on this machine for the profile (run when the page opens and
// on demand: it takes seconds), and each chat platform as the gateway last recorded it (read again
// every few seconds while the page is open).
import { api } from "../api.js";
import { clear, h, notice, table, time } from "../dom.js";

const EVERY_MS = 5000;
const STATE_CLASS = { ok: "ok", fail: "failed", connected: "ok", stopped: "failed", reconnecting: "failed" };
const badge = (text) => h("span", { class: `badge ${STATE_CLASS[text] || ""}` }, text);

function checkRow(check) {
  return h(
    "tr",
    {},
    h("td", {}, check.name),
    h("td", {}, badge(check.status)),
    h("td", {}, check.detail),
    h("td", {}, check.fix ? h("code", {}, check.fix) : ""),
  );
}

function platformRow(p) {
  const older = p.errors.slice(0, -1);
  return h(
    "tr",
    {},
    h("td", {}, p.platform),
    h("td", {}, badge(p.state), p.since ? [" since ", time(p.since)] : ""),
    h("td", {}, p.last_message_at ? time(p.last_message_at) : "never"),
    h("td", {}, `${p.received} received · ${p.answered} answered · ${p.waiting} waiting`),
    h(
      "td",
      {},
      p.last_error ? h("span", { class: "failed" }, p.last_error) : "—",
      older.length ? h("details", {}, h("summary", {}, `${older.length} before`), h("ul", { class: "plain" }, older.map((e) => h("li", {}, e)))) : null,
    ),
    h("td", {}, p.updated_at ? time(p.updated_at) : "—"),
  );
}

function doctorSection() {
  const result = h("div", { "aria-live": "polite" });
  const callModel = h("input", { type: "checkbox", id: "call-model" });
  const again = h("button", { type: "button" }, "Check again");
  const run = async () => {
    again.disabled = true;
    clear(result, h("p", { role: "status", class: "muted" }, "Checking… (up to 15 seconds)"));
    try {
      const found = await api("GET", `/status/checks?call_model=${callModel.checked}`);
      const summary = found.failed ? `${found.failed} failed` : "nothing failed";
      clear(
        result,
        h("p", { role: "status" }, "Checked ", time(found.checked_at), `: ${summary}${found.model_called ? " (the model was called)" : ""}.`),
        table("Doctor's checks", ["Check", "Status", "Detail", "Fix"], found.checks.map(checkRow), "No checks."),
      );
    } catch (error) {
      clear(result, notice(error.message));
    } finally {
      again.disabled = false;
    }
  };
  again.addEventListener("click", run);
  const section = h(
    "section",
    { "aria-labelledby": "doctor-heading" },
    h("h2", { id: "doctor-heading" }, "This machine (hermetic doctor)"),
    h("div", { class: "toolbar" }, again, h("label", { for: "call-model" }, callModel, " Call the model too (one short request)")),
    result,
  );
  return { section, run };
}

function gatewaySection() {
  const body = h("div", {});
  const section = h("section", { "aria-labelledby": "gateway-heading" }, h("h2", { id: "gateway-heading" }, "Chat platforms (the gateway)"), body);
  let timer = null;
  const tick = async () => {
    try {
      const found = await api("GET", "/status/gateway");
      clear(
        body,
        h("p", { class: "muted" }, "As the gateway last recorded it (at each change, from whichever process runs it) · read ", time(Date.now() / 1000)),
        table("Chat platforms", ["Platform", "State", "Last message", "Messages", "Last error", "Recorded"], found.platforms.map(platformRow), "No chat platform is configured (config.yaml's gateway:)."),
      );
    } catch (error) {
      clear(body, notice(error.message));
    } finally {
      if (section.isConnected) timer = setTimeout(tick, EVERY_MS);
    }
  };
  return { section, start: tick, stop: () => clearTimeout(timer) };
}

async function render(view) {
  const doctor = doctorSection();
  const gateway = gatewaySection();
  clear(view, h("h1", {}, "Status"), gateway.section, doctor.section);
  gateway.start();
  doctor.run();
  return gateway.stop;
}

export const statusPage = { pattern: /^\/status$/, nav: "Status", href: "#/status", render };
