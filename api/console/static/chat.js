// One chat on the page: its transcript streaming live, what it waits for (tool calls, or a
// budget), its cost, its queue, retries and errors, the composer (Enter sends, Escape
// interrupts), the turns' timeline and the approval audit. The data is ChatData's
// (chat_data.js), the live events ChatFeed's (chat_feed.js); this draws them and sends what
// the person does.

import { ApprovalForm, BudgetForm, ClientToolForm } from "./actions.js";
import { request } from "./api.js";
import { ChatData } from "./chat_data.js";
import { ChatFeed } from "./chat_feed.js";
import { chatLabel, modelLabel } from "./chats.js";
import { h, newId, replace, usd } from "./dom.js";
import { auditNode, timelineNode } from "./timeline.js";
import { draftNode, messageNode, resultsByCall } from "./transcript.js";

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

/** The chat's cost (its subagents' included) and its budget: "$0.0150 spent of a $0.0500
 * budget"; nothing on a chat with no cost and no budget (a deployment with no prices). */
function costLine(chat) {
  const cost = chat.cost_usd || 0;
  const budget = chat.budget_usd;
  if (budget === null || budget === undefined) return cost ? `${usd(cost)} spent` : "";
  return `${usd(cost)} spent of a ${usd(budget)} budget`;
}

/** A pause, told apart from the next one (a raise too small to pay for the step pauses
 * again, with a higher limit). */
function budgetKey(pending) {
  const { budget, holder, turn_id: turn, step, limit_usd: limit, spent_usd: spent } = pending;
  return [budget, holder, turn, step, limit, spent].join("|");
}

export class ChatView {
  constructor(id, config, { onState, onChat }) {
    this.id = id;
    this.config = config;
    this.data = new ChatData(id, {
      changed: () => this.schedule(),
      onChat,
      note: (text) => replace(this.notice, text),
    });
    this.feed = new ChatFeed(this.data, {
      onState,
      onEnded: (err) => replace(this.errorBox, `The chat's stream ended: ${errorText(err)}`),
    });
    this.nodes = new Map();
    this.actionKey = "";
    this.tab = "transcript";
    this.frame = null;
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
    this.cost = h("span", { class: "meta cost", title: "What this chat and its subagents cost so far" });
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
      h("header", { class: "chat-head" }, this.title, this.status, this.meta, this.cost, this.family),
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
      await this.data.refreshChat();
      await this.data.loadTranscript();
      this.data.markLoaded();
      this.feed.load("loadDecisions");
      this.feed.load("loadChildren");
      this.feed.connect(0);
      this.input.focus();
    } catch (err) {
      replace(this.errorBox, `Could not open this chat: ${errorText(err)}`);
    }
  }

  schedule() {
    if (this.frame !== null || this.data.closed) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.render();
    });
  }

  render() {
    if (this.data.closed) return;
    this.renderHead();
    this.renderTranscript();
    this.renderActions();
    this.renderQueue();
    this.renderRetry();
    if (this.tab === "timeline") this.renderTimeline();
    if (this.tab === "audit") replace(this.panel, auditNode(this.data.decisions));
  }

  renderHead() {
    const chat = this.data.chat;
    if (!chat) return;
    replace(this.title, chatLabel(chat));
    replace(this.status, chat.status.replace("_", " "));
    this.status.className = `badge status-${chat.status}`;
    const usage = chat.usage ? `${chat.usage.input_tokens} in / ${chat.usage.output_tokens} out tokens` : "";
    replace(this.meta, `${modelLabel(chat.model)} · ${usage}`);
    replace(this.cost, costLine(chat));
    this.interruptButton.disabled = !this.data.busy();
    const parent = chat.parent_chat_id
      ? h("a", { href: `#/chats/${chat.parent_chat_id}` }, "Parent chat")
      : null;
    const kids = this.data.children.map((c) =>
      h("a", { href: `#/chats/${c.id}`, class: "child" }, chatLabel(c)),
    );
    replace(this.family, parent, kids.length ? ["Subagents: ", kids] : null);
    const error = chat.status === "error" ? chat.last_error : null;
    replace(this.errorBox, error ? `Error (${error.kind}): ${error.message}` : null);
  }

  renderTranscript() {
    const ordered = this.data.ordered();
    const results = resultsByCall(ordered);
    for (const [callId, part] of this.data.streamedResults) if (!results.has(callId)) results.set(callId, part);
    const decisions = new Map(this.data.decisions.map((d) => [d.tool_call_id, d]));
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
    if (this.data.draft.size) nodes.push(draftNode(this.data.draft));
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
    const chat = this.data.chat;
    const waiting = Boolean(chat && chat.status === "requires_action");
    // Paused on a budget, a turn waits for no call (pending_tool_calls is null then).
    const budget = waiting ? chat.pending_budget || null : null;
    const pending = waiting && !budget ? chat.pending_tool_calls || [] : [];
    const key = budget ? `budget:${budgetKey(budget)}` : pending.map((c) => c.id).join(",");
    if (key === this.actionKey) return;
    this.actionKey = key;
    const approvals = pending.filter((c) => c.action === "approval");
    const client = pending.filter((c) => c.action !== "approval");
    const sent = () => this.feed.load("refreshChat");
    const expires = chat?.action_expires_at
      ? h("p", { class: "hint" }, `Waiting until ${new Date(chat.action_expires_at).toLocaleTimeString()}.`)
      : null;
    replace(
      this.actions,
      pending.length ? expires : null,
      approvals.length ? new ApprovalForm(this.id, approvals, sent).element : null,
      client.length ? new ClientToolForm(this.id, client, sent).element : null,
      budget ? new BudgetForm(this.id, budget, sent, expires).element : null,
    );
  }

  renderQueue() {
    const queued = this.data.chat?.queued_messages || [];
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
    const { retry, chat } = this.data;
    if (!retry || !chat || chat.status !== "running") {
      replace(this.retryBox);
      return;
    }
    const left = Math.max(0, Math.ceil((new Date(retry.retrying_at).getTime() - Date.now()) / 1000));
    const why = retry.error ? `${retry.error.kind || ""}: ${retry.error.message || ""}` : "";
    const model = retry.model ? ` with ${retry.model.provider}/${retry.model.name}` : "";
    replace(this.retryBox, `Retrying${model} (attempt ${retry.attempt}) in ${left} s. ${why}`);
  }

  renderTimeline() {
    const { turnEvents, turnRuns } = this.data;
    const cost = (message) => this.data.cost(message);
    replace(this.panel, timelineNode(this.config, this.id, this.data.ordered(), turnEvents, turnRuns, cost));
  }

  showTab(name) {
    this.tab = name;
    for (const tab of this.tabs) tab.setAttribute("aria-pressed", String(tab.textContent.toLowerCase() === name));
    this.transcript.hidden = name !== "transcript";
    this.panel.hidden = name === "transcript";
    if (name === "audit") this.feed.load("loadDecisions");
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
      if (answer.queued && this.data.busy()) {
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
    this.feed.load("refreshChat");
  }

  key(event) {
    if (event.key === "Escape" && this.data.busy()) {
      event.preventDefault();
      this.interrupt();
    }
  }

  close() {
    this.data.closed = true;
    this.feed.stop();
    clearInterval(this.ticker);
    document.removeEventListener("keydown", this.onKey);
    if (this.frame !== null) cancelAnimationFrame(this.frame);
  }
}
