// Installing skills from a URL or TAP/NAME: a review first (nothing merged: each candidate's verdict,
// reasons and threat findings), then the install with the findings the user accepted.
import { api } from "../api.js";
import { clear, h, notice } from "../dom.js";

const FINDING_ID = /, id (t-[0-9a-f]+)\)/g;

function candidateCard(candidate, accepted) {
  const reasons = candidate.verdict.reasons.map((reason) => {
    const ids = [...reason.matchAll(FINDING_ID)].map((m) => m[1]);
    return h(
      "li",
      {},
      reason,
      ids.map((id) => {
        const box = h("input", { type: "checkbox", id: `accept-${id}`, onchange: () => (box.checked ? accepted.add(id) : accepted.delete(id)) });
        return h("div", {}, box, h("label", { for: `accept-${id}` }, ` Accept finding ${id} for this install`));
      }),
    );
  });
  return h(
    "li",
    { class: "card" },
    h("h3", {}, candidate.name, " ", h("span", { class: `badge ${candidate.verdict.status}` }, candidate.verdict.status), ` ${candidate.change}`),
    candidate.scripts.length ? h("p", {}, `Executable files: ${candidate.scripts.join(", ")}`) : h("p", { class: "muted" }, "Instructions only (no executable files)."),
    candidate.warnings.map((w) => notice(w, "ok")),
    reasons.length ? h("ul", {}, reasons) : null,
  );
}

export function installForm(onInstalled) {
  const source = h("input", { id: "install-source", required: true, placeholder: "https://…/skill.tar.gz, git repo, TAP/NAME" });
  const unverified = h("input", { id: "install-unverified", type: "checkbox" });
  const review = h("div", { "aria-live": "polite" });
  const accepted = new Set();
  const send = (confirm) =>
    api("POST", "/skills/install", { source: source.value.trim(), accept: [...accepted], allow_unverified: unverified.checked, confirm });
  const form = h(
    "form",
    { class: "card", "aria-label": "Install skills" },
    h("label", { for: "install-source" }, "Install from a URL or TAP/NAME"),
    h("div", { class: "toolbar" }, source, h("button", { type: "submit" }, "Review")),
    h("div", {}, unverified, h("label", { for: "install-unverified" }, " Allow skills with scripts but no checks")),
    review,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    accepted.clear();
    clear(review, h("p", { class: "muted" }, "Fetching and verifying…"));
    try {
      const plan = await send(false);
      const install = h("button", { type: "button" }, "Install");
      install.addEventListener("click", async () => {
        try {
          const done = await send(true);
          if (done.merged.length) onInstalled(`Installed: ${done.merged.join(", ")}`);
          else clear(review, notice("Nothing was installed: no candidate passed."));
        } catch (error) {
          clear(review, notice(error.message));
        }
      });
      clear(review, h("p", {}, `From ${plan.source}${plan.commit ? ` at ${plan.commit.slice(0, 12)}` : ""}:`), h("ol", { class: "plain" }, plan.candidates.map((c) => candidateCard(c, accepted))), install);
    } catch (error) {
      clear(review, notice(error.message));
    }
  });
  return form;
}
