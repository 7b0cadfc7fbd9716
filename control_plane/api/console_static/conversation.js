// A session's conversation as it is rendered: the stored messages, then live events appended as
// they arrive (one DOM change per event, none dropped). Tool calls are <details>, folded once done.
import { api } from "./api.js";
import { clear, h } from "./dom.js";

function argsText(args) {
  if (typeof args === "string") {
    try {
      return JSON.stringify(JSON.parse(args), null, 2);
    } catch {
      return args;
    }
  }
  return JSON.stringify(args, null, 2);
}

function summaryOf(name, args) {
  const text = typeof args === "string" ? args : JSON.stringify(args);
  return `${name} ${text.length > 80 ? `${text.slice(0, 80)}…` : text}`;
}

export class Conversation {
  constructor(sessionId, onUsage) {
    this.sessionId = sessionId;
    this.onUsage = onUsage;
    this.el = h("ol", { class: "conversation", "aria-label": "Conversation" });
    this.calls = new Map();
    this.reply = null;
    this.questions = new Map();
    this.rendered = 0;
  }

  message(role, text, extra = "") {
    const item = h("li", { class: `msg ${role} ${extra}` }, h("span", { class: "role" }, role), h("div", { class: "text" }, text));
    this.el.append(item);
    return item;
  }

  toolCall(callId, name, args, open) {
    const output = h("pre", { class: "output" });
    const state = h("span", { class: "state" }, open ? "running" : "");
    const details = h(
      "details",
      { class: "tool", open },
      h("summary", {}, h("code", {}, summaryOf(name, args)), " ", state),
      h("pre", { class: "args" }, argsText(args)),
      output,
    );
    this.el.append(h("li", { class: "msg tool" }, details));
    this.calls.set(callId, { details, output, state });
    return this.calls.get(callId);
  }

  // The stored history: user and assistant messages, each assistant tool call with its result.
  history(messages) {
    for (const m of messages) {
      if (m.role === "user") this.message("user", m.content || "");
      else if (m.role === "assistant") {
        if (m.content) this.message("assistant", m.content);
        for (const call of m.tool_calls || []) {
          const fn = call.function || {};
          this.toolCall(call.id, fn.name || "tool", fn.arguments || "", false);
        }
      } else if (m.role === "tool") {
        const call = this.calls.get(m.tool_call_id) || this.toolCall(m.tool_call_id, m.name || "tool", "", false);
        call.output.textContent = m.content || "";
      }
    }
  }

  event(e) {
    this.rendered += 1;
    const handler = this[`on_${e.type}`];
    if (handler) handler.call(this, e);
  }

  on_user_message(e) {
    this.reply = null;
    this.message("user", e.content, e.steer ? "steer" : "");
  }

  on_text_delta(e) {
    if (!this.reply) this.reply = this.message("assistant", "").querySelector(".text");
    this.reply.append(e.text);
  }

  on_assistant_message(e) {
    if (e.content) {
      if (!this.reply) this.reply = this.message("assistant", "").querySelector(".text");
      this.reply.textContent = e.content;
    }
    this.reply = null;
  }

  on_tool_start(e) {
    this.reply = null;
    this.toolCall(e.call_id, e.name, e.arguments, true);
  }

  on_tool_progress(e) {
    const call = this.calls.get(e.call_id);
    if (call) call.output.append(e.text);
  }

  on_tool_end(e) {
    const call = this.calls.get(e.call_id) || this.toolCall(e.call_id, e.name, "", false);
    call.output.textContent = e.result;
    call.state.textContent = `${e.ok ? "ok" : "failed"} · ${Math.round(e.duration_ms)} ms`;
    call.details.classList.toggle("failed", !e.ok);
    call.details.open = false;
  }

  on_usage(e) {
    this.onUsage(e);
  }

  on_notice(e) {
    this.message("notice", e.message);
  }

  on_error(e) {
    this.message("error", e.message);
  }

  on_child_start(e) {
    this.message("notice", `delegated (${e.sandbox} sandbox): ${e.goal}`);
  }

  on_question(e) {
    const status = h("p", { class: "answer", "aria-live": "polite" });
    const buttons = h("div", { class: "choices" });
    const send = async (answer) => {
      try {
        await api("POST", `/sessions/${encodeURIComponent(this.sessionId)}/questions/${encodeURIComponent(e.id)}`, { answer });
      } catch (error) {
        status.textContent = error.message;
      }
    };
    if (e.choices.length) {
      for (const choice of e.choices) buttons.append(h("button", { type: "button", onclick: () => send(choice) }, choice));
    } else {
      const input = h("input", { type: "text", "aria-label": "Your answer" });
      const form = h("form", {}, input, h("button", { type: "submit" }, "Answer"));
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        send(input.value);
      });
      buttons.append(form);
    }
    const details = Object.entries(e.detail || {}).map(([key, value]) => h("li", {}, `${key}: ${value}`));
    const card = h(
      "li",
      { class: `msg question ${e.kind}`, role: "group", "aria-label": `Question: ${e.prompt}` },
      h("span", { class: "role" }, e.kind === "approval" ? "approval needed" : "question"),
      h("p", {}, e.prompt),
      details.length ? h("ul", {}, details) : null,
      buttons,
      status,
    );
    this.el.append(card);
    this.questions.set(e.id, { card, buttons, status });
    buttons.querySelector("button, input")?.focus();
  }

  on_answered(e) {
    const question = this.questions.get(e.id);
    if (!question) return;
    clear(question.buttons);
    question.status.textContent = e.answer === null ? `not answered (${e.by})` : `answered: ${e.answer} (${e.by})`;
  }

  on_turn_end(e) {
    this.reply = null;
    if (e.delegate_call) return;
    if (e.reason !== "done") this.message("notice", `turn ended: ${e.reason}`);
  }
}
