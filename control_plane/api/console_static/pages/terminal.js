// A live terminal in a session's sandbox (xterm.js over the /sessions/ID/terminal WebSocket).
// #/sessions/ID/terminal?terminal=t1 attaches to that terminal again (the URL gets the id once it is
// open, so a reload comes back to the same shell with its screen replayed).
import "../adopted_style.js";
import { FitAddon } from "../vendor/addon-fit.js";
import { Terminal } from "../vendor/xterm.js";
import { clear, h } from "../dom.js";

const encoder = (message) => JSON.stringify(message);

function render(view, [sessionId], query) {
  const session = encodeURIComponent(sessionId);
  const status = h("p", { class: "muted", role: "status" }, "Connecting to the sandbox…");
  const screen = h("div", { class: "terminal" });
  const again = h("button", { type: "button", hidden: true, onclick: () => location.reload() }, "Reconnect");
  const interrupt = h("button", { type: "button" }, "Send Ctrl-C");
  const hint = h("p", { class: "muted" }, "Esc then Tab (or Shift+Tab) leaves the terminal; the Esc still reaches the program.");
  clear(
    view,
    h("p", {}, h("a", { href: `#/sessions/${session}` }, "← Session"), " · ", h("a", { href: `#/sessions/${session}/sandbox` }, "Files")),
    h("h1", {}, "Sandbox terminal"),
    h("div", { class: "toolbar" }, interrupt, h("a", { href: `#/sessions/${session}/terminal?new=${Date.now()}` }, "New terminal"), again),
    status,
    hint,
    screen,
  );
  const term = new Terminal({ cursorBlink: true, fontSize: 14, fontFamily: "ui-monospace, monospace", scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(screen);
  fit.fit();

  const params = new URLSearchParams({ rows: term.rows, cols: term.cols });
  if (query.get("terminal")) params.set("terminal", query.get("terminal"));
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/sessions/${session}/terminal?${params}`);
  socket.binaryType = "arraybuffer";
  const send = (message) => socket.readyState === WebSocket.OPEN && socket.send(encoder(message));
  let ended = false; // the program's end or the server's refusal is said; a close then adds nothing

  socket.addEventListener("message", (event) => {
    if (typeof event.data !== "string") {
      term.write(new Uint8Array(event.data));
      return;
    }
    const message = JSON.parse(event.data);
    if (message.type === "terminal") {
      history.replaceState(null, "", `#/sessions/${session}/terminal?terminal=${encodeURIComponent(message.id)}`);
      status.textContent = `Terminal ${message.id} (${message.command}) ${message.attached ? "attached again" : "opened"}.`;
      term.focus();
    } else if (message.type === "exit") {
      ended = true;
      status.textContent = `The terminal's program ended (exit code ${message.exit_code}).`;
    } else if (message.type === "error") {
      ended = message.message.startsWith("not a terminal message") ? ended : true;
      status.textContent = message.message;
    }
  });
  socket.addEventListener("close", () => {
    if (!ended) status.textContent = "Disconnected from the sandbox terminal.";
    again.hidden = false;
  });
  // The terminal takes Tab (a shell's completion), so the keyboard needs a way out that programs rarely
  // need: Esc then Tab, as code editors do.
  let escaped = false;
  term.attachCustomKeyEventHandler((event) => {
    if (event.type !== "keydown" || MODIFIERS.has(event.key)) return true; // Shift of Shift+Tab keeps the Esc
    if (event.key === "Tab" && escaped) {
      escaped = false;
      event.preventDefault();
      leave(screen, event.shiftKey);
      return false;
    }
    escaped = event.key === "Escape";
    return true;
  });
  term.onData((data) => send({ type: "input", data }));
  term.onResize(({ rows, cols }) => send({ type: "resize", rows, cols }));
  interrupt.addEventListener("click", () => {
    send({ type: "input", data: "\x03" });
    term.focus();
  });
  const resized = new ResizeObserver(() => fit.fit());
  resized.observe(screen);
  return () => {
    resized.disconnect();
    socket.close();
    term.dispose();
  };
}

const MODIFIERS = new Set(["Shift", "Control", "Alt", "Meta"]);
const FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])";

// Focus the control after `screen` in the page (forward), or before it (back), wrapping around.
function leave(screen, back) {
  const controls = [...document.querySelectorAll(FOCUSABLE)].filter((el) => !screen.contains(el) && !el.hidden && !el.disabled);
  const after = controls.filter((el) => screen.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING);
  const before = controls.filter((el) => !after.includes(el));
  const target = back ? (before.at(-1) ?? after.at(-1)) : (after[0] ?? before[0]);
  target?.focus();
}

export const terminalPage = { pattern: /^\/sessions\/([^/?]+)\/terminal$/, nav: "Sessions", render };
