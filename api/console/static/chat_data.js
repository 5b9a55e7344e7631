// A chat's data as the page holds it: the chat, its transcript, the step streaming now, the
// tool decisions, its subagents, the turns' timeline events and each step's cost. Loaded from
// the API and folded from the chat's events; it draws nothing: `changed()` asks the view to.

import { allPages, request } from "./api.js";

// The statuses in which a turn holds a chat: chatd/chat_status.py (BusyStatus).
const BUSY = ["running", "requires_action"];

export class ChatData {
  constructor(id, { changed, onChat, note }) {
    this.id = id;
    this.changed = changed;
    this.onChat = onChat;
    this.note = note;
    this.chat = null;
    this.messages = new Map();
    this.draft = new Map();
    this.streamedResults = new Map();
    this.decisions = [];
    this.children = [];
    this.turnEvents = new Map();
    this.turnRuns = new Map();
    this.costs = new Map();
    this.unpriced = new Set();
    this.turnId = null;
    this.retry = null;
    this.maxLoaded = 0;
    this.lastMessageEvent = 0;
    this.closed = false;
  }

  busy() {
    return Boolean(this.chat && BUSY.includes(this.chat.status));
  }

  /** The transcript as loaded is where the stream's replay ends: earlier steps are in it. */
  markLoaded() {
    this.maxLoaded = Math.max(0, ...this.messages.keys());
  }

  /** After the stream's events were pruned: the reloaded transcript is all there is. */
  restart() {
    this.markLoaded();
    this.lastMessageEvent = this.maxLoaded;
    this.draft.clear();
  }

  replaying() {
    return this.lastMessageEvent < this.maxLoaded;
  }

  async loadTranscript() {
    const messages = await allPages(
      (after) => `/chats/${this.id}/messages?after_id=${after}&limit=500`,
      0,
      (page) => page.messages,
      (page) => page.next_after_id,
    );
    this.messages = new Map(messages.map((message) => [message.id, message]));
    this.costs = new Map();
    for (const message of messages) this.keepCost(message);
    this.changed();
  }

  /** A transcript page's cost of a model step (a `message` event carries none). */
  keepCost(message) {
    if (message.role === "assistant" && message.cost_usd !== null && message.cost_usd !== undefined) {
      this.costs.set(message.id, { usd: message.cost_usd, estimated: Boolean(message.cost_estimated) });
    }
  }

  /** What the model step `message` cost: `{usd, estimated}`, or undefined (not priced, or
   * not read yet). */
  cost(message) {
    return this.costs.get(message.id);
  }

  /** The costs of the steps that streamed in since the transcript was read: each step's own
   * page (its cost is recorded before the step is saved), then the chat's total. */
  async loadCosts() {
    if (this.costing) {
      this.costAgain = true;
      return;
    }
    this.costing = true;
    try {
      do {
        this.costAgain = false;
        for (const id of [...this.unpriced].sort((a, b) => a - b)) {
          const page = await request("GET", `/chats/${this.id}/messages?after_id=${id - 1}&limit=1`);
          const message = (page.messages || []).find((m) => m.id === id);
          if (message) this.keepCost(message);
          if (this.costs.has(id)) this.costlier = true;
          this.unpriced.delete(id);
        }
      } while (this.costAgain && !this.closed);
    } finally {
      this.costing = false;
    }
    this.changed();
    if (this.costlier) {
      await this.refreshChat();
      this.costlier = false;
    }
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
    this.changed();
  }

  async loadDecisions() {
    this.decisions = await allPages(
      (offset) => `/chats/${this.id}/tool-decisions?offset=${offset}&limit=500`,
      0,
      (page) => page.decisions,
      (page) => page.next_offset,
    );
    this.changed();
  }

  async loadChildren() {
    this.children = (await request("GET", `/chats/${this.id}/children`)).data;
    this.changed();
  }

  /** Fold one event of the chat's stream in; the names of the loaders it asks for. */
  apply({ event, data }) {
    const loads = {
      message: () => this.onMessage(data),
      message_part: () => this.onPart(data),
      status: () => this.onStatus(data),
      retry: () => this.onRetry(data),
      reset: () => this.onReset(),
      queue: () => ["refreshChat"],
      error: () => {
        if (this.chat) this.chat.last_error = data;
      },
      chat: () => ["refreshChat"],
      subagent: () => ["loadChildren"],
      transcript_edited: () => {
        for (const id of [...this.messages.keys()]) if (id >= data.from_message_id) this.messages.delete(id);
      },
    }[event]?.();
    this.changed();
    return loads || [];
  }

  onMessage(message) {
    this.lastMessageEvent = Math.max(this.lastMessageEvent, message.id);
    this.messages.set(message.id, message);
    if (message.role === "assistant") this.draft.clear();
    if (message.role === "tool") this.streamedResults.clear();
    this.retry = null;
    if (message.role !== "assistant" || message.id <= this.maxLoaded || this.costs.has(message.id)) return [];
    this.unpriced.add(message.id);
    return ["loadCosts"];
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
    if (this.chat) {
      this.chat.status = data.status;
      // A pause on a budget says so in its event; any other status ends such a pause.
      this.chat.pending_budget = data.pending_budget ?? null;
    }
    if (data.status !== "running") {
      this.draft.clear();
      this.retry = null;
    }
    if (data.status === "running") this.note(null);
    if (this.replaying()) return [];
    return data.status === "running" ? ["refreshChat"] : ["refreshChat", "loadDecisions"];
  }

  onRetry(data) {
    this.retry = data;
    this.turnEvent({ kind: "retry", ...data });
  }

  onReset() {
    this.draft.clear();
    this.turnEvent({ kind: "reset", note: "the step's attempt was abandoned; a new one followed" });
    if (!this.replaying()) this.note("The model step restarted (its worker went away); the partial output was dropped.");
  }

  turnEvent(event) {
    const turn = this.turnId || "none";
    if (!this.turnEvents.has(turn)) this.turnEvents.set(turn, []);
    this.turnEvents.get(turn).push(event);
  }

  /** The transcript in order, as the view and the timeline read it. */
  ordered() {
    return [...this.messages.values()].sort((a, b) => a.id - b.id);
  }
}
