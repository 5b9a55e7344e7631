// The chat list: loaded once, then kept live by the owner's watch stream (/api/v1/stream).
// Subagents nest under their parent; a status filter narrows it.

import { LiveStream, request } from "./api.js";
import { clock, h, replace } from "./dom.js";

const STATUSES = ["waiting", "running", "requires_action", "error"];
const PAGES = 5;

export function chatLabel(chat) {
  return chat.title || `Untitled chat ${chat.id.slice(0, 8)}`;
}

export function modelLabel(model) {
  return model ? `${model.provider}/${model.name}` : "";
}

export class ChatList {
  constructor(config, onState) {
    this.chats = new Map();
    this.selected = null;
    this.onState = onState;
    this.filter = h(
      "select",
      { id: "status-filter", onchange: () => this.render() },
      h("option", { value: "" }, "all"),
      STATUSES.map((s) => h("option", { value: s }, s.replace("_", " "))),
    );
    this.list = h("ul", { class: "chat-tree" });
    this.note = h("p", { class: "hint", role: "status" });
    this.element = h(
      "div",
      { class: "chat-list" },
      h("label", { for: "status-filter", class: "filter" }, "Status ", this.filter),
      h("nav", { "aria-label": "Chats" }, this.list),
      this.note,
    );
    this.stream = null;
    this.start();
  }

  async start() {
    // The watch stream opens first (from now), so nothing between the load and it is missed.
    this.stream = new LiveStream("/stream", {
      onEvent: (frame) => this.onEvent(frame),
      onState: this.onState,
      onRefused: () => this.restart(),
    });
    await this.load();
  }

  restart() {
    this.stream?.stop();
    this.start();
  }

  async load() {
    let before = null;
    try {
      for (let page = 0; page < PAGES; page += 1) {
        const query = new URLSearchParams({ include_children: "true", limit: "200" });
        if (before) query.set("before", before);
        const answer = await request("GET", `/chats?${query}`);
        for (const chat of answer.chats) this.remember(chat, false);
        before = answer.next_before;
        if (!answer.has_more) break;
      }
      replace(this.note, before ? "Older chats are not listed." : "");
    } catch (err) {
      replace(this.note, `Could not list chats: ${err.message}`);
    }
    this.render();
  }

  remember(chat, fresher = true) {
    const known = this.chats.get(chat.id);
    if (known && !fresher) return;
    this.chats.set(chat.id, { ...(known || {}), ...chat, activity: chat.updated_at });
  }

  /** A chat's fields as the open chat read them. */
  upsert(chat) {
    this.remember(chat);
    this.render();
  }

  /** Events apply one at a time, in stream order: a new chat's first event waits for its
   * read, and the events behind it must not overtake it (a stale "running" after "waiting"). */
  onEvent(frame) {
    this.applied = (this.applied || Promise.resolve())
      .then(() => this.apply(frame))
      .catch((err) => console.error(err));
  }

  async apply(frame) {
    const data = frame.data || {};
    const id = data.chat_id;
    if (!id) return;
    const known = this.chats.get(id);
    if (!known) {
      try {
        this.remember(await request("GET", `/chats/${id}`));
      } catch {
        return; // gone already (deleted, or a store: false chat)
      }
    }
    const chat = this.chats.get(id);
    if (frame.event === "status" || frame.event === "subagent") {
      if (data.status) chat.status = data.status;
      if (data.status && data.status !== "error") chat.last_error = null;
    }
    if (frame.event === "subagent" && data.parent_chat_id) chat.parent_chat_id = data.parent_chat_id;
    if ((frame.event === "chat" || frame.event === "subagent") && data.title) chat.title = data.title;
    if (frame.event === "error") {
      chat.status = "error";
      chat.last_error = data;
    }
    chat.activity = new Date().toISOString();
    this.render();
  }

  select(id) {
    this.selected = id;
    this.render();
  }

  render() {
    const wanted = this.filter.value;
    const children = new Map();
    for (const chat of this.chats.values()) {
      const parent = chat.parent_chat_id && this.chats.has(chat.parent_chat_id) ? chat.parent_chat_id : null;
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(chat);
    }
    for (const list of children.values()) {
      list.sort((a, b) => (b.created_at || "").localeCompare(a.created_at || ""));
    }
    const shown = (chat) =>
      !wanted || chat.status === wanted || (children.get(chat.id) || []).some(shown);
    const items = (parent) =>
      (children.get(parent) || []).filter(shown).map((chat) => this.item(chat, items(chat.id), wanted));
    const roots = items(null);
    replace(this.list, roots.length ? roots : h("li", { class: "hint" }, "No chats yet."));
  }

  item(chat, nested, wanted) {
    const link = h(
      "a",
      {
        href: `#/chats/${chat.id}`,
        "aria-current": chat.id === this.selected ? "page" : null,
      },
      chatLabel(chat),
    );
    const meta = h(
      "span",
      { class: "meta" },
      h("span", { class: `badge status-${chat.status}` }, (chat.status || "").replace("_", " ")),
      " ",
      h("span", { class: "model" }, modelLabel(chat.model)),
      " ",
      h("time", { datetime: chat.activity || "" }, clock(chat.activity)),
    );
    const dim = wanted && chat.status !== wanted;
    return h(
      "li",
      { "data-chat-id": chat.id, class: dim ? "dim" : "" },
      link,
      meta,
      nested.length ? h("ul", { "aria-label": `Subagents of ${chatLabel(chat)}` }, nested) : null,
    );
  }

  close() {
    this.stream?.stop();
  }
}
