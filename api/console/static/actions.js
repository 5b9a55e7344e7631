// requires_action: a form per kind of waiting call. Approvals: Approve, Edit arguments,
// Deny with a message, Remember; every asked call's decision goes in one submission, sent
// once each call has one (a 400, such as edited arguments that don't fit the tool's schema,
// is shown and the decisions stay). Client tools: a JSON result per call, checked before
// sending. A turn paused on a budget: raise it by an amount, or end the turn.

import { request } from "./api.js";
import { h, pretty, replace, usd } from "./dom.js";

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

const CHAT_ID = /^[0-9a-f-]{36}$/;

/** Which budget stopped the turn, as a phrase: "this turn's budget", "alice's budget for
 * today", or another chat's (a subagent spends its parent's) with a link to it. */
function whichBudget(pending, chatId) {
  const { budget, holder } = pending;
  if (budget === "owner_day") return [`${holder}'s budget for today`];
  if (budget === "owner_month") return [`${holder}'s budget for this month`];
  const what = budget === "turn" ? "turn" : "chat";
  if (holder === chatId) return [`this ${what}'s budget`];
  const other = CHAT_ID.test(holder || "")
    ? h("a", { href: `#/chats/${holder}` }, `chat ${holder.slice(0, 8)}`)
    : holder;
  return [budget === "turn" ? "the budget of the turn of " : "the budget of ", other];
}

/** At least `value`, to the hundredth of a cent: what a raise must add. */
function roundedUp(value) {
  return (Math.max(0.0001, Math.ceil(value * 10000) / 10000)).toFixed(4);
}

export class BudgetForm {
  constructor(chatId, pending, onSent, expires = null) {
    this.chatId = chatId;
    this.onSent = onSent;
    const needed = pending.next_step_usd - (pending.limit_usd - pending.spent_usd);
    this.amount = h("input", {
      id: "budget-add",
      type: "number",
      min: "0",
      step: "any",
      inputmode: "decimal",
      value: roundedUp(needed),
      "aria-describedby": "budget-needed",
    });
    this.raise = h("button", { type: "submit" }, "Raise");
    this.stop = h("button", { type: "button", class: "danger" }, "End turn");
    this.stop.addEventListener("click", () => this.send({ decision: "stop" }));
    this.progress = h("p", { class: "hint", role: "status" });
    this.error = h("p", { class: "error", role: "alert" });
    this.element = h(
      "form",
      {
        class: "actions budget",
        "aria-label": "Turn paused on a budget",
        "data-budget": pending.budget,
        novalidate: true,
        onsubmit: (e) => (e.preventDefault(), this.raiseBy()),
      },
      h("h3", {}, "Paused on a budget"),
      h(
        "p",
        { class: "budget-state" },
        "The next step would go over ",
        whichBudget(pending, chatId),
        ": ",
        h("span", { class: "spent" }, `${usd(pending.spent_usd)} spent of ${usd(pending.limit_usd)}`),
        "; ",
        h("span", { class: "next-step" }, `the next step needs at least ${usd(pending.next_step_usd)}`),
        ".",
      ),
      expires,
      h(
        "div",
        { class: "row" },
        h("label", { for: "budget-add" }, "Raise the budget by (USD)"),
        this.amount,
        this.raise,
        this.stop,
      ),
      h(
        "p",
        { class: "hint", id: "budget-needed" },
        `${usd(Number(roundedUp(needed)))} more lets the next step run. Ending the turn keeps its work so far.`,
      ),
      this.progress,
      this.error,
    );
  }

  raiseBy() {
    const amount = Number(this.amount.value);
    if (!this.amount.value.trim() || !Number.isFinite(amount) || amount <= 0) {
      replace(this.error, "Enter an amount in US dollars, above 0.");
      this.amount.focus();
      return;
    }
    this.send({ add_usd: amount });
  }

  async send(body) {
    replace(this.error);
    replace(this.progress, body.decision === "stop" ? "Ending the turn…" : "Raising the budget…");
    this.raise.disabled = this.stop.disabled = true;
    try {
      await request("POST", `/chats/${this.chatId}/budget`, body);
      replace(this.progress, body.decision === "stop" ? "Ended: the turn stops here." : "Raised: the turn goes on.");
      this.onSent();
    } catch (err) {
      replace(this.progress);
      replace(this.error, errorText(err));
      if (err.status === 409) this.onSent(); // decided elsewhere, or no longer paused
    } finally {
      this.raise.disabled = this.stop.disabled = false;
    }
  }
}
