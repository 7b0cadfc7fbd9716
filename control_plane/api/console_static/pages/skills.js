// The skill library (verdict, state, runs, success rate) and one skill: its content, provenance,
// and every version with the gate's verification log (each check's output) and its diff.
import { api } from "../api.js";
import { clear, h, notice, time } from "../dom.js";
import { curationPanel } from "./skill_curation.js";
import { installForm } from "./skill_install.js";

const percent = (rate) => (rate === null ? "never run" : `${Math.round(rate * 100)}%`);

async function renderList(view, _params, _query, message = "") {
  clear(view, h("h1", {}, "Skills"), h("p", { class: "muted" }, "Loading…"));
  let skills;
  try {
    skills = await api("GET", "/skills");
  } catch (error) {
    clear(view, h("h1", {}, "Skills"), notice(error.message));
    return;
  }
  const rows = skills.map((skill) =>
    h(
      "tr",
      {},
      h("td", {}, h("a", { href: `#/skills/${encodeURIComponent(skill.name)}` }, skill.name)),
      h("td", {}, skill.description),
      h("td", {}, h("span", { class: `badge ${skill.status}` }, skill.status)),
      h("td", {}, skill.state),
      h("td", { class: "num" }, skill.runs),
      h("td", { class: "num" }, percent(skill.success_rate)),
      h("td", {}, skill.provenance ? "installed" : "written here"),
    ),
  );
  clear(
    view,
    h("h1", {}, "Skills"),
    message ? notice(message, "ok") : null,
    installForm((installed) => renderList(view, _params, _query, installed)),
    curationPanel((applied) => renderList(view, _params, _query, applied)),
    skills.length
      ? h(
          "table",
          { class: "list" },
          h("thead", {}, h("tr", {}, ["Name", "Description", "Verdict", "State", "Runs", "Success", "Origin"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, rows),
        )
      : h("p", {}, "The library is empty: the agent writes skills as it learns."),
  );
}

function verdictLog(verdict) {
  if (!verdict) return h("p", { class: "muted" }, "Merged without a verdict.");
  return h(
    "div",
    { class: "verdict" },
    h("p", {}, h("span", { class: `badge ${verdict.status}` }, verdict.status), ` proposed by ${verdict.proposer}, ${Math.round(verdict.duration_ms)} ms, network ${verdict.network}`, verdict.image ? `, image ${verdict.image}` : ""),
    verdict.reasons.length ? h("ul", {}, verdict.reasons.map((r) => h("li", {}, r))) : null,
    h("ol", { class: "checks" }, verdict.checks.map((check) => h("li", {}, h("span", { class: check.ok ? "ok" : "failed" }, check.ok ? "✓ " : "✗ "), check.name, h("pre", {}, check.output || "")))),
  );
}

async function renderSkill(view, [name]) {
  let skill, history;
  try {
    [skill, history] = await Promise.all([
      api("GET", `/skills/${encodeURIComponent(name)}`),
      api("GET", `/skills/${encodeURIComponent(name)}/history`),
    ]);
  } catch (error) {
    clear(view, h("h1", {}, name), notice(error.message));
    return;
  }
  const versions = history.versions.slice().reverse().map((version) => {
    const diff = h("pre", { class: "diff" });
    const details = h(
      "details",
      { class: "version" },
      h("summary", {}, `Version ${version.version} `, time(version.created), version.note ? ` — ${version.note}` : ""),
      h("h3", {}, "Verification log"),
      verdictLog(version.verdict),
      version.version > 1 ? h("h3", {}, `Changes from version ${version.version - 1}`) : null,
      version.version > 1 ? diff : null,
    );
    details.addEventListener("toggle", async () => {
      if (!details.open || version.version < 2 || diff.textContent) return;
      const query = `old=${version.version - 1}&new=${version.version}`;
      try {
        diff.textContent = (await api("GET", `/skills/${encodeURIComponent(name)}/diff?${query}`)).diff || "(no change)";
      } catch (error) {
        diff.textContent = error.message;
      }
    });
    return details;
  });
  const refused = history.verdicts.filter((v) => v.status === "fail");
  clear(
    view,
    h("p", {}, h("a", { href: "#/skills" }, "← Skills")),
    h("h1", {}, skill.name),
    h("p", {}, skill.description),
    h(
      "dl",
      { class: "facts" },
      [["Verdict", skill.status], ["State", skill.state], ["Version", skill.version], ["Runs", skill.runs], ["Success rate", percent(skill.success_rate)], ["Pinned", skill.pinned ? "yes" : "no"], ["Provenance", skill.provenance || "written here"]].map(([t, v]) => [h("dt", {}, t), h("dd", {}, String(v))]),
    ),
    h("h2", {}, "Versions"),
    versions,
    refused.length ? [h("h2", {}, "Refused candidates"), refused.map(verdictLog)] : null,
    h("h2", {}, "SKILL.md"),
    h("pre", { class: "content" }, skill.content),
  );
  if (versions.length) versions[0].open = true;
}

export const skillsPage = { pattern: /^\/skills$/, nav: "Skills", href: "#/skills", render: renderList };
export const skillPage = { pattern: /^\/skills\/([a-z0-9-]+)$/, nav: "Skills", render: renderSkill };
