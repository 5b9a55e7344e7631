// The public API with the signed-in key as a bearer token (never in a URL, never logged),
// and Server-Sent Events read with fetch (EventSource can't send a header).

const KEY_STORAGE = "chatd.console.key";
export const API = "/api/v1";

export function storedKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

export function storeKey(key) {
  sessionStorage.setItem(KEY_STORAGE, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_STORAGE);
}

/** An API error answer: `status`, `code`, `message` and `detail` from its body. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "http_error";
    this.detail = error.detail || {};
  }
}

let onUnauthorized = () => {};

/** What to do when the key is refused (sign out). */
export function whenUnauthorized(callback) {
  onUnauthorized = callback;
}

function headers(extra = {}) {
  return { Authorization: `Bearer ${storedKey() || ""}`, ...extra };
}

/** A JSON request; the parsed answer, or an `ApiError`. */
export async function request(method, path, body, extraHeaders = {}) {
  const init = { method, headers: headers(extraHeaders), cache: "no-store" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(API + path, init);
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    if (response.status === 401) onUnauthorized();
    throw new ApiError(response.status, parsed);
  }
  return parsed;
}

/**
 * Every item of a paged list, page after page: `path(cursor)` is a page's address,
 * `items(page)` what it holds and `next(page)` the cursor of the next (null after the last).
 */
export async function allPages(path, first, items, next) {
  const all = [];
  for (let cursor = first; cursor != null; ) {
    const page = await request("GET", path(cursor));
    all.push(...items(page));
    cursor = next(page);
  }
  return all;
}

/** Check a key without storing it: true if the API accepts it. */
export async function keyWorks(key) {
  const response = await fetch(`${API}/chats?limit=1`, {
    headers: { Authorization: `Bearer ${key}` },
    cache: "no-store",
  });
  if (response.ok) return true;
  if (response.status === 401) return false;
  throw new ApiError(response.status, await response.json().catch(() => null));
}

/** Split SSE text into frames: `{id, event, data, retry}` (data parsed as JSON). */
export class FrameParser {
  constructor() {
    this.buffer = "";
  }

  /** The complete frames in `chunk` and what came before it. */
  push(chunk) {
    this.buffer += chunk.replace(/\r\n?/g, "\n");
    const frames = [];
    let end = this.buffer.indexOf("\n\n");
    while (end !== -1) {
      const frame = parseFrame(this.buffer.slice(0, end));
      this.buffer = this.buffer.slice(end + 2);
      if (frame) frames.push(frame);
      end = this.buffer.indexOf("\n\n");
    }
    return frames;
  }
}

function parseFrame(block) {
  const frame = { id: null, event: "message", data: [], retry: null };
  let any = false;
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") frame.id = value;
    else if (field === "event") frame.event = value;
    else if (field === "data") frame.data.push(value);
    else if (field === "retry" && /^\d+$/.test(value)) frame.retry = Number(value);
    else continue;
    any = true;
  }
  if (!any) return null;
  const raw = frame.data.join("\n");
  try {
    frame.data = raw ? JSON.parse(raw) : null;
  } catch {
    frame.data = raw;
  }
  return frame;
}

/**
 * A stream that stays open: it reconnects after a drop with `Last-Event-ID` (so nothing is
 * missed or repeated) and tells `onState` whether it is "live" or "reconnecting".
 * `onEvent(frame)` gets every event; `onRefused(error)` a refusal it can't retry past
 * (410 cursor_expired, 400 invalid_cursor, 404): the owner reloads and opens another.
 */
export class LiveStream {
  constructor(path, { after = null, onEvent, onState = () => {}, onRefused = () => {} }) {
    this.path = path;
    this.lastId = after;
    this.onEvent = onEvent;
    this.onState = onState;
    this.onRefused = onRefused;
    this.retryMs = 2000;
    this.stopped = false;
    this.controller = null;
    this.run();
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let failures = 0;
    while (!this.stopped) {
      const outcome = await this.once().catch((err) => ({ error: err }));
      if (this.stopped) return;
      if (outcome.refused) {
        this.stopped = true;
        this.onRefused(outcome.refused);
        return;
      }
      failures = outcome.received ? 0 : failures + 1;
      this.onState("reconnecting");
      const wait = Math.min(this.retryMs * Math.max(1, failures), 5000);
      await new Promise((resolve) => setTimeout(resolve, outcome.received ? 250 : wait));
    }
  }

  async once() {
    this.controller = new AbortController();
    const extra = this.lastId !== null ? { "Last-Event-ID": String(this.lastId) } : {};
    const response = await fetch(API + this.path, {
      headers: headers({ Accept: "text/event-stream", ...extra }),
      signal: this.controller.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      const body = await response.json().catch(() => null);
      const error = new ApiError(response.status, body);
      if (response.status === 401) onUnauthorized();
      if ([400, 401, 404, 410].includes(response.status)) return { refused: error };
      const after = Number(response.headers.get("Retry-After"));
      if (after > 0) this.retryMs = after * 1000;
      return { received: false };
    }
    this.onState("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = new FrameParser();
    let received = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done || this.stopped) break;
      for (const frame of parser.push(value)) {
        if (frame.retry !== null) this.retryMs = frame.retry;
        if (frame.id === null) continue;
        this.lastId = Number(frame.id);
        received = true;
        try {
          this.onEvent(frame);
        } catch (err) {
          console.error("console: an event could not be shown", frame.event, err);
        }
      }
    }
    return { received };
  }
}
