// The console's only way to the server: the same API routes every client uses, signed in by the
// HttpOnly cookie; state-changing requests carry the sign-in's CSRF token.

let csrfToken = "";
let onSignedOut = () => {};

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
  }
}

export function signedIn(signin) {
  csrfToken = signin ? signin.csrf_token : "";
}

export function whenSignedOut(callback) {
  onSignedOut = callback;
}

function detailOf(data) {
  if (!data) return "";
  if (typeof data.detail === "string") return data.detail;
  if (Array.isArray(data.detail)) return data.detail.map((d) => d.msg).join("; ");
  return "";
}

// `body`: sent as JSON, or as it is when it is FormData (a file upload).
export async function api(method, path, body) {
  const headers = {};
  const form = body instanceof FormData;
  if (body !== undefined && !form) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined || form ? body : JSON.stringify(body),
  });
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : null;
  if (!response.ok) {
    if (response.status === 401 && !path.startsWith("/auth/")) onSignedOut();
    throw new ApiError(response.status, detailOf(data));
  }
  return data;
}

export const EVENT_TYPES = [
  "text_delta", "assistant_message", "tool_start", "tool_progress", "tool_end", "usage", "notice",
  "user_message", "error", "question", "answered", "child_start", "child_end", "todo", "turn_end",
];

// A session's live events (SSE). `after` is where to start (a message's `after`); the stream is
// closed at the turn's end (EventSource would otherwise reconnect when the server ends it).
export function follow(sessionId, after, onEvent) {
  const query = new URLSearchParams({ until_turn_end: "true" });
  if (after !== undefined && after !== null) query.set("after", String(after));
  const source = new EventSource(`/sessions/${encodeURIComponent(sessionId)}/events?${query}`);
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (message) => {
      const event = JSON.parse(message.data);
      onEvent(event);
      if (type === "turn_end" && !event.delegate_call) source.close();
    });
  }
  return source;
}
