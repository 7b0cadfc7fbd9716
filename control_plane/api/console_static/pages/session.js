// One session: its details and token counts, the conversation (history, then live events over SSE),
// and the chat composer: send (a new turn, or steering the running one), interrupt.
import { api, follow } from "../api.js";
import { Conversation } from "../conversation.js";
import { clear, h, notice, time, tokens } from "../dom.js";
import { sandboxSection } from "../session_sandbox.js";

async function render(view, [sessionId]) {
  let detail;
  try {
    detail = await api("GET", `/sessions/${encodeURIComponent(sessionId)}`);
  } catch (error) {
    clear(view, h("h1", {}, "Session"), notice(error.message));
    return null;
  }
  const { session } = detail;
  const totals = { prompt: session.prompt_tokens, completion: session.completion_tokens, cost: session.cost };
  const counts = h("span", { id: "counts" }, tokens(totals.prompt, totals.completion, totals.cost));
  const state = h("span", { id: "run-state", role: "status" });
  const conversation = new Conversation(sessionId, (usage) => {
    totals.prompt += usage.prompt_tokens;
    totals.completion += usage.completion_tokens;
    totals.cost += usage.cost || 0;
    counts.textContent = tokens(totals.prompt, totals.completion, totals.cost);
  });
  conversation.history(detail.messages);

  let stream = null;
  const setRunning = (running) => {
    state.textContent = running ? "running" : "idle";
    interrupt.disabled = !running;
  };
  const listen = (after) => {
    if (stream) return;
    setRunning(true);
    stream = follow(sessionId, after, (event) => {
      conversation.event(event);
      if (event.type === "turn_end" && !event.delegate_call) {
        stream = null;
        setRunning(false);
      }
    });
  };

  const input = h("textarea", { id: "message", name: "message", rows: 3, required: true });
  const interrupt = h("button", { type: "button", id: "interrupt" }, "Interrupt");
  const problem = h("div", { "aria-live": "polite" });
  const composer = h(
    "form",
    { class: "composer" },
    h("label", { for: "message" }, "Message (while a turn runs, it steers it)"),
    input,
    h("div", { class: "toolbar" }, h("button", { type: "submit" }, "Send"), interrupt),
    problem,
  );
  composer.addEventListener("submit", async (event) => {
    event.preventDefault();
    const content = input.value;
    if (!content.trim()) return;
    try {
      const posted = await api("POST", `/sessions/${encodeURIComponent(sessionId)}/messages`, { content });
      input.value = "";
      clear(problem);
      if (posted.status === "started") listen(posted.after);
      else conversation.message("notice", `Steering the running turn (after its current tool calls): ${content}`);
    } catch (error) {
      clear(problem, notice(error.message));
    }
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) composer.requestSubmit();
  });
  interrupt.addEventListener("click", () =>
    api("POST", `/sessions/${encodeURIComponent(sessionId)}/interrupt`).catch((error) => clear(problem, notice(error.message))),
  );

  clear(
    view,
    h("p", {}, h("a", { href: "#/sessions" }, "← Sessions")),
    h("h1", {}, session.title || session.id),
    h(
      "dl",
      { class: "facts" },
      [["Source", session.source], ["Model", session.model || "—"], ["Backend", session.backend || "—"], ["Started", time(session.created_at)], ["Tokens", counts], ["Run", state]].map(
        ([term, value]) => [h("dt", {}, term), h("dd", {}, value)],
      ),
    ),
    sandboxSection(sessionId).section,
    conversation.el,
    composer,
  );
  setRunning(false);
  // a running turn is rendered from its events, all of them: its messages may not all be stored yet
  if (detail.running) listen(detail.after ?? undefined);
  return () => stream && stream.close();
}

export const sessionPage = { pattern: /^\/sessions\/([^/?]+)$/, nav: "Sessions", render };
