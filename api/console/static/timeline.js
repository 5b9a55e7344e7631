// A turn's timeline (its steps, tool runs, retries, resets and model fallbacks, with
// durations, token usage and each step's cost, the turn's total, and a link to its workflow
// run in the Temporal UI) and the approval audit.

import { clock, costText, duration, h } from "./dom.js";
import { decisionText } from "./transcript.js";

/**
 * The turn's run in the Temporal UI: the run of `chat-<id>` that began it (the messages
 * name it). A turn whose run is not known (its queue row was pruned) links the chat's runs.
 */
export function workflowLink(config, chatId, runId) {
  if (!config.temporal_ui_url) return null;
  const namespace = encodeURIComponent(config.namespace || "default");
  const workflows = `${config.temporal_ui_url}/namespaces/${namespace}/workflows`;
  const workflowId = encodeURIComponent(`chat-${chatId}`);
  if (runId) return `${workflows}/${workflowId}/${encodeURIComponent(runId)}/history`;
  return `${workflows}?query=${encodeURIComponent(`WorkflowId="chat-${chatId}"`)}`;
}

function ms(a, b) {
  return new Date(b).getTime() - new Date(a).getTime();
}

function tokens(usage) {
  return usage ? `${usage.input_tokens} in / ${usage.output_tokens} out tokens` : "";
}

/** Messages grouped by turn, in order. */
function turns(messages) {
  const byTurn = new Map();
  for (const message of messages) {
    const key = message.turn_id || "none";
    if (!byTurn.has(key)) byTurn.set(key, []);
    byTurn.get(key).push(message);
  }
  return [...byTurn.entries()];
}

const ESTIMATED = "≈: part of it is an estimate (an attempt cut short, or lost)";
const TURN_COST = "What this chat's steps in the turn cost";

/** What the turn's steps cost, together (undefined when none is priced). */
function turnCost(list, cost) {
  const costs = list.filter((m) => m.role === "assistant").map(cost).filter(Boolean);
  if (!costs.length) return undefined;
  return { usd: costs.reduce((sum, c) => sum + c.usd, 0), estimated: costs.some((c) => c.estimated) };
}

function costCell(value) {
  return value ? h("span", { class: "cost", title: value.estimated ? ESTIMATED : null }, costText(value)) : "";
}

function stepRows(list, cost) {
  const rows = [];
  const calls = new Map();
  let step = 0;
  let previous = list[0];
  for (const message of list) {
    const took = duration(ms(previous.created_at, message.created_at));
    if (message.role === "assistant") {
      step += 1;
      const names = message.parts.filter((p) => p.type === "tool_call").map((p) => p.name);
      for (const part of message.parts) if (part.type === "tool_call") calls.set(part.id, message);
      const what = names.length ? `calls ${names.join(", ")}` : "answers";
      rows.push([`step ${step}`, `${what}`, took, tokens(message.usage), costCell(cost(message))]);
    } else if (message.role === "tool") {
      for (const part of message.parts) {
        const call = calls.get(part.tool_call_id);
        const took2 = call ? duration(ms(call.created_at, message.created_at)) : took;
        rows.push([`tool ${part.name || ""}`, part.is_error ? "error" : "result", took2, "", ""]);
      }
    } else if (message.role === "user" && message !== list[0]) {
      rows.push(["message", message.compressed ? "compacted" : "user message", took, "", ""]);
    }
    previous = message;
  }
  return rows;
}

function eventRows(events) {
  return events.map((e) => {
    if (e.kind === "retry") {
      const what = e.model ? `fallback to ${e.model.provider}/${e.model.name}` : `attempt ${e.attempt}`;
      const why = e.error ? `${e.error.kind || ""} ${e.error.message || ""}`.trim() : "";
      return ["retry", `${what}: ${why}`, duration(e.delay_ms), "", ""];
    }
    return [e.kind, e.note || "", "", "", ""];
  });
}

/** The timeline of every turn (newest last). `events` maps a turn id to what its stream
 * told (retries, resets); `runs`, to the Temporal run that began it (from its `running`
 * status, for turns newer than the transcript page that named it); `cost(message)` is a
 * step's `{usd, estimated}` (undefined: not priced, or not known yet). */
export function timelineNode(config, chatId, messages, events, runs, cost = () => undefined) {
  const groups = turns(messages);
  if (!groups.length) return h("p", { class: "hint" }, "No turns yet.");
  return h(
    "ol",
    { class: "timeline" },
    groups.map(([turnId, list], i) => {
      const first = list[0];
      const last = list[list.length - 1];
      const link = workflowLink(config, chatId, first.turn_run_id || runs.get(turnId));
      const rows = [...stepRows(list, cost), ...eventRows(events.get(turnId) || [])];
      const total = turnCost(list, cost);
      return h(
        "li",
        { class: "turn", "data-turn-id": turnId },
        h(
          "div",
          { class: "turn-head" },
          h("strong", {}, `Turn ${i + 1}`),
          ` ${clock(first.created_at)}, ${duration(ms(first.created_at, last.created_at))} `,
          total
            ? h(
                "span",
                { class: "turn-cost", title: total.estimated ? `${TURN_COST}; ${ESTIMATED}` : TURN_COST },
                `cost ${costText(total)} `,
              )
            : null,
          link
            ? h(
                "a",
                { href: link, target: "_blank", rel: "noopener noreferrer", class: "temporal-link" },
                `Workflow run of turn ${i + 1} in the Temporal UI`,
              )
            : h("span", { class: "hint" }, "(set CHATD_TEMPORAL_UI_URL to link the Temporal UI)"),
        ),
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, ["what", "detail", "took", "usage", "cost"].map((c) => h("th", {}, c)))),
          h("tbody", {}, rows.map((row) => h("tr", {}, row.map((c) => h("td", {}, c))))),
        ),
      );
    }),
  );
}

export function auditNode(decisions) {
  if (!decisions.length) return h("p", { class: "hint" }, "No approval decisions yet.");
  return h(
    "table",
    { class: "audit" },
    h(
      "thead",
      {},
      h("tr", {}, ["when", "tool", "decision", "arguments sha-256"].map((c) => h("th", {}, c))),
    ),
    h(
      "tbody",
      {},
      decisions.map((d) =>
        h(
          "tr",
          {},
          h("td", {}, clock(d.decided_at)),
          h("td", {}, d.tool_name),
          h("td", {}, decisionText(d) + (d.remember ? " (remembered)" : "")),
          h("td", { class: "mono" }, d.arguments_sha256.slice(0, 16)),
        ),
      ),
    ),
  );
}
