// The curation plan (what `hermetic skills curate` would do) and its apply: the staleness changes
// shown are sent back as the confirmation, and the server applies them only while they are still
// the plan. A near-duplicate pair is offered to the reviewer on request: its session (the reviewer's
// turn, its skill_manage merge and the gate's verdict) opens and streams. Failing skills are listed.
import { api } from "../api.js";
import { clear, h, notice } from "../dom.js";

function planView(plan, status, onApplied) {
  const merge = async (pair) => {
    try {
      const review = await api("POST", "/skills/curation/merge", { a: pair.a, b: pair.b });
      location.hash = `#/sessions/${encodeURIComponent(review.session_id)}`;
    } catch (error) {
      clear(status, notice(error.message));
    }
  };
  const pairs = plan.duplicates.map((p) => h("li", {}, `${p.a} + ${p.b}: near-duplicates (${p.reason}) `, h("button", { type: "button", "aria-label": `Merge ${p.a} and ${p.b} with the reviewer`, onclick: () => merge(p) }, "Merge with the reviewer")));
  const failing = plan.failing.map((name) => `${name}: failing (out of the prompt listing; restore it from its page or the CLI)`);
  const apply = async () => {
    try {
      const applied = await api("POST", "/skills/curation/apply", { changes: plan.changes });
      await onApplied(`Curation applied: ${applied.changes.join("; ") || "nothing changed"}`);
    } catch (error) {
      clear(status, notice(error.message));
    }
  };
  return [
    h("h3", {}, "Changes"),
    plan.changes.length ? h("ul", { class: "plan" }, plan.changes.map((c) => h("li", {}, c))) : h("p", { class: "muted" }, "No skill is due to go stale or be archived."),
    plan.changes.length ? h("button", { type: "button", onclick: apply }, "Apply these changes") : null,
    pairs.length ? [h("h3", {}, "Near-duplicates"), h("p", { class: "muted" }, "The reviewer may merge a pair into one skill; the merged skill must pass the gate in a throwaway sandbox, or nothing changes."), h("ul", { class: "pairs" }, pairs)] : null,
    failing.length ? [h("h3", {}, "For a look"), h("ul", {}, failing.map((t) => h("li", {}, t)))] : null,
  ];
}

export function curationPanel(onApplied) {
  const body = h("div", {});
  const status = h("div", { "aria-live": "polite" });
  const show = async () => {
    try {
      clear(body, planView(await api("GET", "/skills/curation/plan"), status, onApplied));
    } catch (error) {
      clear(status, notice(error.message));
    }
  };
  return h(
    "section",
    { class: "card", "aria-labelledby": "h-curation" },
    h("h2", { id: "h-curation" }, "Curation"),
    h("button", { type: "button", onclick: show }, "Show the curation plan"),
    body,
    status,
  );
}
