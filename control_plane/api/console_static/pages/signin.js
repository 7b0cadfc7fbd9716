import { api } from "../api.js";
import { clear, h, notice } from "../dom.js";

export function renderSignIn(view, done) {
  const input = h("input", {
    id: "token", name: "token", type: "password", autocomplete: "current-password", required: true,
  });
  const status = h("div", { "aria-live": "polite" });
  const form = h(
    "form",
    { class: "card signin" },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste an API token (", h("code", {}, "hermetic token create"), "). It is exchanged for a sign-in that ends when you sign out."),
    h("label", { for: "token" }, "API token"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      done(await api("POST", "/auth/login", { token: input.value.trim() }));
    } catch (error) {
      clear(status, notice(error.message));
      input.focus();
    }
  });
  clear(view, form);
  input.focus();
}
