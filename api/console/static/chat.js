// One chat: its transcript streaming live (resumed with Last-Event-ID after a drop), what it
// waits for, its queue, retries and errors, the composer (Enter sends, Escape interrupts),
// the turns' timeline and the approval audit.

import { ClientToolForm, ApprovalForm } from "./actions.js";
import { LiveStream, allPages, request } from "./api.js";
import { chatLabel, modelLabel } from "./chats.js";
import { h, newId, replace } from "./dom.js";
import { auditNode, timelineNode } from "./timeline.js";
import { draftNode, messageNode, resultsByCall } from "./transcript.js";

// The statuses in which a turn holds a chat: chatd/chat_status.py (BusyStatus).
const BUSY = ["running", "requires_action"];

function errorText(err) {
  return `${err.status || ""} ${err.code || ""}: ${err.message}`.trim();
}

/** Make `parent`'s children `nodes`, moving only what changed: a node left in place is not
 * laid out again (a megabyte-long message costs its layout once, not once per delta). */
function reconcile(parent, nodes) {
  nodes.forEach((node, i) => {
    const current = parent.children[i];
    if (current !== node) parent.insertBefore(node, current || null);
  });
  while (parent.children.length > nodes.length) parent.lastElementChild.remove();
}

export class ChatView {
  constructor(id, config, { onState, onChat }) {
    this.id = id;
    this.config = config;
    this.onState = onState;
    this.onChat = onChat;
    this.chat = null;
    this.messages = new Map();
    this.draft = new Map();
    this.streamedResults = new Map();
    this.nodes = new Map();
    this.decisions = [];
    this.children = [];
    this.turnEvents = new Map();
    this.turnRuns = new Map();
    this.turnId = null;
    this.retry = null;
    this.maxLoaded = 0;
    this.lastMessageEvent = 0;
    this.actionKey = "";
    this.tab = "transcript";
    this.frame = null;
    this.closed = false;
    this.missed = new Set();
    this.build();
    this.onKey = (event) => this.key(event);
    document.addEventListener("keydown", this.onKey);
    this.ticker = setInterval(() => this.renderRetry(), 1000);
    this.open();
  }

  build() {
    this.title = h("h2", { class: "chat-title" }, "…");
    this.status = h("span", { class: "badge", role: "status", "aria-label": "Chat status" });
    this.meta = h("span", { class: "meta" });
    this.family = h("div", { class: "family" });
    this.errorBox = h("div", { class: "error-box", role: "alert" });
    this.retryBox = h("div", { class: "retry-box", role: "status" });
    this.notice = h("div", { class: "notice", role: "status" });
    this.transcript = h("ol", { class: "transcript", "aria-label": "Transcript" });
    this.actions = h("div", { class: "action-area" });
    this.queue = h("div", { class: "queue" });
    this.panel = h("div", { class: "panel", hidden: true });
    this.tabs = ["transcript", "timeline", "audit"].map((name) =>
      h(
        "button",
        { type: "button", class: "tab", "aria-pressed": String(name === this.tab), onclick: () => this.showTab(name) },
        name[0].toUpperCase() + name.slice(1),
      ),
    );
    this.input = h("textarea", { id: "message", rows: 3, placeholder: "Enter sends, Shift+Enter is a new line, Escape interrupts" });
    this.onBusy = h(
      "select",
      { id: "on-busy" },
      ["enqueue", "interrupt", "reject"].map((v) => h("option", { value: v }, v)),
    );
    this.sendButton = h("button", { type: "submit" }, "Send");
    this.interruptButton = h(
      "button",
      { type: "button", class: "danger", disabled: true, onclick: () => this.interrupt() },
      "Interrupt",
    );
    this.sendError = h("p", { class: "error", role: "alert" });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    const composer = h(
      "form",
      { class: "composer", "aria-label": "Send a message", onsubmit: (e) => (e.preventDefault(), this.send()) },
      h("label", { for: "message" }, "Message"),
      this.input,
      h(
        "div",
        { class: "row" },
        this.sendButton,
        this.interruptButton,
        h("label", { for: "on-busy", class: "inline" }, "When busy "),
        this.onBusy,
      ),
      this.sendError,
    );
    this.element = h(
      "article",
      { class: "chat", "aria-label": "Chat" },
      h("header", { class: "chat-head" }, this.title, this.status, this.meta, this.family),
      this.errorBox,
      this.retryBox,
      this.notice,
      h("div", { class: "tabs", role: "group", "aria-label": "Views" }, this.tabs),
      this.transcript,
      this.panel,
      this.actions,
      this.queue,
      composer,
    );
  }

  async open() {
    try {
      await this.refreshChat();
      await this.loadTranscript();
      this.maxLoaded = Math.max(0, ...this.messages.keys());
      this.inBackground(this.loadDecisions);
      this.inBackground(this.loadChildren);
      this.connect(0);
      this.input.focus();
    } catch (err) {
      replace(this.errorBox, `Could not open this chat: ${errorText(err)}`);
    }
  }

  connect(after) {
    this.stream?.stop();
    this.stream = new LiveStream(`/chats/${this.id}/stream`, {
      after,
      onEvent: (frame) => this.onEvent(frame),
      onState: (state) => {
        this.onState(state);
        if (state === "live") for (const load of this.missed) this.inBackground(load);
      },
      onRefused: (err) => this.refused(err),
    });
  }

  /**
   * Run one of the loaders an event asks for without waiting on it. A loader that fails
   * (the gateway is restarting) runs again once the stream is live, so the page catches up
   * instead of throwing.
   */
  inBackground(load) {
    this.missed.delete(load);
    load.call(this).catch(() => {
      if (!this.closed) this.missed.add(load);
    });
  }

  async refused(err) {
    if (this.closed) return;
    if (err.status === 410 || err.status === 400) {
      // Events were pruned (or the cursor is unknown): reload, then stream from the last.
      await this.loadTranscript();
      this.maxLoaded = Math.max(0, ...this.messages.keys());
      this.lastMessageEvent = this.maxLoaded;
      this.draft.clear();
      this.connect(err.detail.last_event_id ?? null);
      this.schedule();
    } else {
      replace(this.errorBox, `The chat's stream ended: ${errorText(err)}`);
    }
  }

  async loadTranscript() {
    const messages = await allPages(
      (after) => `/chats/${this.id}/messages?after_id=${after}&limit=500`,
      0,
      (page) => page.messages,
      (page) => page.next_after_id,
    );
    this.messages = new Map(messages.map((message) => [message.id, message]));
    this.schedule();
  }

  async refreshChat() {
    if (this.refreshing) {
      this.refreshAgain = true;
      return;
    }
    this.refreshing = true;
    try {
      do {
        this.refreshAgain = false;
        this.chat = await request("GET", `/chats/${this.id}`);
      } while (this.refreshAgain && !this.closed);
      this.onChat(this.chat);
    } finally {
      this.refreshing = false;
    }
    this.schedule();
  }

  async loadDecisions() {
    this.decisions = await allPages(
      (offset) => `/chats/${this.id}/tool-decisions?offset=${offset}&limit=500`,
      0,
      (page) => page.decisions,
      (page) => page.next_offset,
    );
    // No cached node is dropped: a message's signature (renderTranscript) already changes
    // when one of its calls gets a decision, and a decision, once made, stays as it is.
    this.schedule();
  }

  async loadChildren() {
    this.children = (await request("GET", `/chats/${this.id}/children`)).data;
    this.schedule();
  }

  replaying() {
    return this.lastMessageEvent < this.maxLoaded;
  }

  onEvent({ event, data }) {
    if (this.closed) return;
    const handler = {
      message: () => this.onMessage(data),
      message_part: () => this.onPart(data),
      status: () => this.onStatus(data),
      retry: () => this.onRetry(data),
      reset: () => this.onReset(),
      queue: () => this.inBackground(this.refreshChat),
      error: () => {
        if (this.chat) this.chat.last_error = data;
      },
      chat: () => this.inBackground(this.refreshChat),
      subagent: () => this.inBackground(this.loadChildren),
      transcript_edited: () => {
        for (const id of [...this.messages.keys()]) if (id >= data.from_message_id) this.messages.delete(id);
      },
    }[event];
    if (handler) handler();
    this.schedule();
  }

  onMessage(message) {
    this.lastMessageEvent = Math.max(this.lastMessageEvent, message.id);
    this.messages.set(message.id, message);
    if (message.role === "assistant") this.draft.clear();
    if (message.role === "tool") this.streamedResults.clear();
    this.retry = null;
  }

  onPart({ role, part }) {
    if (this.replaying()) return; // a step the loaded transcript holds already
    this.retry = null;
    if (role === "tool" && part.type === "tool_result") {
      this.streamedResults.set(part.tool_call_id, part);
      return;
    }
    const key = `${part.type}:${part.index ?? 0}`;
    const known = this.draft.get(key);
    if (part.type === "text" || part.type === "reasoning") {
      this.draft.set(key, { ...part, text: (known?.text || "") + (part.text || "") });
    } else if (part.type === "tool_call") {
      const args = (known?.arguments || "") + (part.args_delta || "");
      this.draft.set(key, { ...(known || {}), ...part, arguments: args });
    } else {
      this.draft.set(`${key}:${this.draft.size}`, part);
    }
  }

  onStatus(data) {
    if (data.turn_id) this.turnId = data.turn_id;
    if (data.turn_id && data.run_id) this.turnRuns.set(data.turn_id, data.run_id);
    if (this.chat) this.chat.status = data.status;
    if (data.status !== "running") {
      this.draft.clear();
      this.retry = null;
    }
    if (data.status === "running") replace(this.notice);
    if (this.replaying()) return;
    this.inBackground(this.refreshChat);
    if (data.status !== "running") this.inBackground(this.loadDecisions);
  }

  onRetry(data) {
    this.retry = data;
    this.turnEvent({ kind: "retry", ...data });
  }

  onReset() {
    this.draft.clear();
    this.turnEvent({ kind: "reset", note: "the step's attempt was abandoned; a new one followed" });
    if (!this.replaying()) replace(this.notice, "The model step restarted (its worker went away); the partial output was dropped.");
  }

  turnEvent(event) {
    const turn = this.turnId || "none";
    if (!this.turnEvents.has(turn)) this.turnEvents.set(turn, []);
    this.turnEvents.get(turn).push(event);
  }

  schedule() {
    if (this.frame !== null || this.closed) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.render();
    });
  }

  render() {
    if (this.closed) return;
    this.renderHead();
    this.renderTranscript();
    this.renderActions();
    this.renderQueue();
    this.renderRetry();
    if (this.tab === "timeline") this.renderTimeline();
    if (this.tab === "audit") replace(this.panel, auditNode(this.decisions));
  }

  renderHead() {
    const chat = this.chat;
    if (!chat) return;
    replace(this.title, chatLabel(chat));
    replace(this.status, chat.status.replace("_", " "));
    this.status.className = `badge status-${chat.status}`;
    const usage = chat.usage ? `${chat.usage.input_tokens} in / ${chat.usage.output_tokens} out tokens` : "";
    replace(this.meta, `${modelLabel(chat.model)} · ${usage}`);
    this.interruptButton.disabled = !BUSY.includes(chat.status);
    const parent = chat.parent_chat_id
      ? h("a", { href: `#/chats/${chat.parent_chat_id}` }, "Parent chat")
      : null;
    const kids = this.children.map((c) =>
      h("a", { href: `#/chats/${c.id}`, class: "child" }, chatLabel(c)),
    );
    replace(this.family, parent, kids.length ? ["Subagents: ", kids] : null);
    const error = chat.status === "error" ? chat.last_error : null;
    replace(this.errorBox, error ? `Error (${error.kind}): ${error.message}` : null);
  }

  renderTranscript() {
    const ordered = [...this.messages.values()].sort((a, b) => a.id - b.id);
    const results = resultsByCall(ordered);
    for (const [callId, part] of this.streamedResults) if (!results.has(callId)) results.set(callId, part);
    const decisions = new Map(this.decisions.map((d) => [d.tool_call_id, d]));
    const calls = new Set();
    for (const m of ordered) for (const p of m.parts) if (p.type === "tool_call") calls.add(p.id);
    const nodes = [];
    for (const message of ordered) {
      const shown = message.parts.some((p) => p.type !== "tool_result" || !calls.has(p.tool_call_id));
      if (message.role === "tool" && !shown) continue;
      const ids = message.parts.filter((p) => p.type === "tool_call").map((p) => p.id);
      const sig = ids.map((c) => `${results.has(c) ? "r" : "-"}${decisions.has(c) ? "d" : "-"}`).join("");
      const cached = this.nodes.get(message.id);
      if (cached && cached.message === message && cached.sig === sig) {
        nodes.push(cached.node);
        continue;
      }
      const node = messageNode(message, results, decisions, this.editButton(message));
      this.nodes.set(message.id, { message, sig, node });
      nodes.push(node);
    }
    if (this.draft.size) nodes.push(draftNode(this.draft));
    const atBottom = this.transcript.scrollHeight - this.transcript.scrollTop - this.transcript.clientHeight < 80;
    reconcile(this.transcript, nodes);
    if (atBottom) this.transcript.scrollTop = this.transcript.scrollHeight;
  }

  editButton(message) {
    if (message.role !== "user" || message.compressed) return null;
    return h("button", { type: "button", class: "link", onclick: (e) => this.edit(message, e.target) }, "Edit");
  }

  edit(message, button) {
    const item = button.closest("li");
    const text = message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
    const area = h("textarea", { rows: 3, "aria-label": "Edit message", value: text });
    const error = h("p", { class: "error", role: "alert" });
    const save = h("button", { type: "button" }, "Save and rerun");
    const cancel = h("button", { type: "button", class: "secondary", onclick: () => { this.nodes.delete(message.id); this.render(); } }, "Cancel");
    save.addEventListener("click", async () => {
      try {
        await request("PATCH", `/chats/${this.id}/messages/${message.id}`, { content: area.value }, { "Idempotency-Key": newId() });
      } catch (err) {
        replace(error, errorText(err));
      }
    });
    replace(item.querySelector(".message-body"), area, h("div", { class: "row" }, save, cancel), error);
    area.focus();
  }

  renderActions() {
    const chat = this.chat;
    const pending = chat && chat.status === "requires_action" ? chat.pending_tool_calls || [] : [];
    const key = pending.map((c) => c.id).join(",");
    if (key === this.actionKey) return;
    this.actionKey = key;
    const approvals = pending.filter((c) => c.action === "approval");
    const client = pending.filter((c) => c.action !== "approval");
    const sent = () => this.inBackground(this.refreshChat);
    const expires = chat?.action_expires_at
      ? h("p", { class: "hint" }, `Waiting until ${new Date(chat.action_expires_at).toLocaleTimeString()}.`)
      : null;
    replace(
      this.actions,
      pending.length ? expires : null,
      approvals.length ? new ApprovalForm(this.id, approvals, sent).element : null,
      client.length ? new ClientToolForm(this.id, client, sent).element : null,
    );
  }

  renderQueue() {
    const queued = this.chat?.queued_messages || [];
    replace(
      this.queue,
      queued.length
        ? h(
            "section",
            { "aria-label": "Queued messages" },
            h("h3", {}, `Queued (${queued.length}): they run after this turn`),
            h(
              "ul",
              {},
              queued.map((q) =>
                h(
                  "li",
                  {},
                  q.parts.filter((p) => p.type === "text").map((p) => p.text).join(" "),
                  " ",
                  h("button", { type: "button", class: "link", onclick: () => this.dropQueued(q.id) }, "Remove"),
                ),
              ),
            ),
          )
        : null,
    );
  }

  renderRetry() {
    const retry = this.retry;
    if (!retry || !this.chat || this.chat.status !== "running") {
      replace(this.retryBox);
      return;
    }
    const left = Math.max(0, Math.ceil((new Date(retry.retrying_at).getTime() - Date.now()) / 1000));
    const why = retry.error ? `${retry.error.kind || ""}: ${retry.error.message || ""}` : "";
    const model = retry.model ? ` with ${retry.model.provider}/${retry.model.name}` : "";
    replace(this.retryBox, `Retrying${model} (attempt ${retry.attempt}) in ${left} s. ${why}`);
  }

  renderTimeline() {
    const ordered = [...this.messages.values()].sort((a, b) => a.id - b.id);
    replace(this.panel, timelineNode(this.config, this.id, ordered, this.turnEvents, this.turnRuns));
  }

  showTab(name) {
    this.tab = name;
    for (const tab of this.tabs) tab.setAttribute("aria-pressed", String(tab.textContent.toLowerCase() === name));
    this.transcript.hidden = name !== "transcript";
    this.panel.hidden = name === "transcript";
    if (name === "audit") this.inBackground(this.loadDecisions);
    this.render();
  }

  async send() {
    const content = this.input.value;
    if (!content.trim()) return;
    replace(this.sendError);
    this.sendButton.disabled = true;
    try {
      const body = { content, on_busy: this.onBusy.value };
      const answer = await request("POST", `/chats/${this.id}/messages`, body, { "Idempotency-Key": newId() });
      if (this.input.value === content) this.input.value = "";
      if (answer.queued && this.chat && BUSY.includes(this.chat.status)) {
        replace(this.notice, "Queued: it runs once this turn ends.");
      }
    } catch (err) {
      replace(this.sendError, errorText(err));
    } finally {
      this.sendButton.disabled = false;
      this.input.focus();
    }
  }

  async interrupt() {
    replace(this.sendError);
    try {
      await request("POST", `/chats/${this.id}/interrupt`);
      replace(this.notice, "Interrupted: the partial answer stays.");
    } catch (err) {
      replace(this.sendError, errorText(err));
    }
  }

  async dropQueued(queuedId) {
    try {
      await request("DELETE", `/chats/${this.id}/queue/${queuedId}`);
    } catch (err) {
      replace(this.sendError, errorText(err));
    }
    this.inBackground(this.refreshChat);
  }

  key(event) {
    if (event.key === "Escape" && this.chat && BUSY.includes(this.chat.status)) {
      event.preventDefault();
      this.interrupt();
    }
  }

  close() {
    this.closed = true;
    this.stream?.stop();
    clearInterval(this.ticker);
    document.removeEventListener("keydown", this.onKey);
    if (this.frame !== null) cancelAnimationFrame(this.frame);
  }
}
