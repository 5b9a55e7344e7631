// requires_action: a form per kind of waiting call. Approvals: Approve, Edit arguments,
// Deny with a message, Remember; every asked call's decision goes in one submission, sent
// once each call has one (a 400, such as edited arguments that don't fit the tool's schema,
// is shown and the decisions stay). Client tools: a JSON result per call, checked before
// sending.

import { request } from "./api.js";
import { h, pretty, replace } from "./dom.js";

function errorText(err) {
  return `${err.status || ""} ${err.code || ""}: ${err.message}`.trim();
}

export class ApprovalForm {
  constructor(chatId, calls, onSent) {
    this.chatId = chatId;
    this.calls = calls;
    this.onSent = onSent;
    this.decisions = new Map();
    this.error = h("p", { class: "error", role: "alert" });
    this.progress = h("p", { class: "hint", role: "status" });
    this.element = h(
      "section",
      { class: "actions approvals", "aria-label": "Tool calls waiting for approval" },
      h("h3", {}, "Waiting for your approval"),
      calls.map((call) => this.card(call)),
      this.progress,
      this.error,
    );
    this.showProgress();
  }

  card(call) {
    const args = h("textarea", {
      rows: 4,
      class: "edit-args",
      "aria-label": `Arguments for ${call.name}`,
      value: pretty(call.arguments ?? {}),
      hidden: true,
    });
    const reason = h("input", { type: "text", "aria-label": `Reason for denying ${call.name}` });
    const remember = h("input", { type: "checkbox" });
    const state = h("span", { class: "badge", role: "status" }, "undecided");
    const approve = h("button", { type: "button" }, "Approve");
    const deny = h("button", { type: "button", class: "danger" }, "Deny");
    const edit = h("button", { type: "button", class: "secondary", "aria-expanded": "false" }, "Edit arguments");
    const card = h(
      "article",
      { class: "call-card", "aria-label": `Approval for ${call.name}`, "data-tool-call-id": call.id },
      h("div", { class: "tool-head" }, h("span", { class: "tool-name" }, call.name), state),
      h("pre", { class: "args" }, pretty(call.arguments ?? {})),
      args,
      h("div", { class: "row" }, approve, edit, h("label", { class: "check" }, remember, " Remember")),
      h("div", { class: "row" }, reason, deny),
    );
    edit.addEventListener("click", () => {
      args.hidden = !args.hidden;
      edit.setAttribute("aria-expanded", String(!args.hidden));
      if (!args.hidden) args.focus();
    });
    approve.addEventListener("click", () => {
      const decision = { tool_call_id: call.id, decision: "approve" };
      if (!args.hidden) {
        try {
          decision.arguments = JSON.parse(args.value);
        } catch (err) {
          replace(this.error, `The arguments for ${call.name} are not valid JSON: ${err.message}`);
          return;
        }
      }
      if (remember.checked) decision.remember = true;
      this.decide(call, decision, state, "approve");
    });
    deny.addEventListener("click", () => {
      const decision = { tool_call_id: call.id, decision: "deny" };
      if (reason.value.trim()) decision.message = reason.value.trim();
      this.decide(call, decision, state, "deny");
    });
    return card;
  }

  decide(call, decision, state, label) {
    replace(this.error);
    this.decisions.set(call.id, decision);
    replace(state, label === "approve" ? (decision.arguments ? "approve (edited)" : "approve") : "deny");
    this.showProgress();
    if (this.decisions.size === this.calls.length) this.send();
  }

  showProgress() {
    const left = this.calls.length - this.decisions.size;
    replace(this.progress, left ? `${left} of ${this.calls.length} still to decide; all are sent together.` : "Sending…");
  }

  async send() {
    const decisions = this.calls.map((c) => this.decisions.get(c.id));
    try {
      await request("POST", `/chats/${this.chatId}/tool-approvals`, { decisions });
      replace(this.progress, "Sent.");
      this.onSent();
    } catch (err) {
      replace(this.progress, "Not sent: change a decision and decide again.");
      replace(this.error, errorText(err));
    }
  }
}

export class ClientToolForm {
  constructor(chatId, calls, onSent) {
    this.chatId = chatId;
    this.calls = calls;
    this.onSent = onSent;
    this.fields = calls.map((call) =>
      h("textarea", { rows: 3, "aria-label": `Result for ${call.name}`, placeholder: '"a JSON value"' }),
    );
    this.errors = h("p", { class: "error", role: "alert" });
    this.button = h("button", { type: "submit" }, "Submit results");
    this.element = h(
      "form",
      { class: "actions client-tools", "aria-label": "Client tool results", onsubmit: (e) => this.send(e) },
      h("h3", {}, "Your client's tools were called"),
      calls.map((call, i) =>
        h(
          "article",
          { class: "call-card", "aria-label": `Client tool ${call.name}`, "data-tool-call-id": call.id },
          h("div", { class: "tool-head" }, h("span", { class: "tool-name" }, call.name)),
          h("pre", { class: "args" }, pretty(call.arguments ?? {})),
          this.fields[i],
        ),
      ),
      this.button,
      this.errors,
    );
  }

  async send(event) {
    event.preventDefault();
    const results = [];
    for (const [i, call] of this.calls.entries()) {
      try {
        results.push({ tool_call_id: call.id, output: JSON.parse(this.fields[i].value) });
      } catch (err) {
        replace(this.errors, `The result for ${call.name} is not valid JSON: ${err.message}`);
        this.fields[i].focus();
        return;
      }
    }
    replace(this.errors);
    this.button.disabled = true;
    try {
      await request("POST", `/chats/${this.chatId}/tool-results`, { results });
      this.onSent();
    } catch (err) {
      replace(this.errors, errorText(err));
    } finally {
      this.button.disabled = false;
    }
  }
}
