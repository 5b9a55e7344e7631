// A chat's transcript as DOM: user messages as text, assistant text as markdown (escape
// first), reasoning collapsed, each tool call as a card with its arguments, its result or
// error, and who approved it.

import { clock, h, pretty } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

export function textOf(message) {
  return (message.parts || [])
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("");
}

/** The tool results of `messages` by call id. */
export function resultsByCall(messages) {
  const results = new Map();
  for (const message of messages) {
    for (const part of message.parts || []) {
      if (part.type === "tool_result") results.set(part.tool_call_id, part);
    }
  }
  return results;
}

export function toolCallCard(call, result, decision) {
  const args = call.arguments === "" ? "{}" : call.arguments;
  const state = result ? (result.is_error ? "error" : "done") : "waiting";
  return h(
    "div",
    { class: `tool-call ${state}`, "data-tool-call-id": call.id },
    h(
      "div",
      { class: "tool-head" },
      h("span", { class: "tool-name" }, call.name),
      h("span", { class: "badge" }, state === "waiting" ? "no result yet" : state),
      decision ? h("span", { class: "decision" }, decisionText(decision)) : null,
    ),
    h("pre", { class: "args", "aria-label": `Arguments of ${call.name}` }, pretty(args ?? {})),
    call.original_arguments
      ? h(
          "details",
          {},
          h("summary", {}, "The model's arguments (edited before it ran)"),
          h("pre", { class: "args" }, pretty(call.original_arguments)),
        )
      : null,
    result
      ? h(
          "pre",
          { class: result.is_error ? "result error" : "result", "aria-label": `Result of ${call.name}` },
          pretty(result.output ?? result.data ?? ""),
        )
      : null,
  );
}

export function decisionText(decision) {
  const who = decision.owner
    ? `${decision.owner} (key ${(decision.key_id || "").slice(0, 8)})`
    : decision.decided_by || "an operator";
  const verb = decision.decision === "approve" ? "approved" : "denied";
  const extra = decision.edited ? ", arguments edited" : "";
  const why = decision.message ? `: “${decision.message}”` : "";
  return `${verb} by ${who}${extra}${why}`;
}

function partNodes(message, results, decisions) {
  const nodes = [];
  for (const part of message.parts || []) {
    if (part.type === "text") {
      nodes.push(
        message.role === "user"
          ? h("p", { class: "plain" }, part.text)
          : h("div", { class: "markdown" }, renderMarkdown(part.text)),
      );
    } else if (part.type === "reasoning") {
      nodes.push(
        h("details", { class: "reasoning" }, h("summary", {}, "Reasoning"), h("p", { class: "plain" }, part.text || "")),
      );
    } else if (part.type === "tool_call") {
      nodes.push(toolCallCard(part, results.get(part.id), decisions.get(part.id)));
    } else if (part.type === "tool_result") {
      nodes.push(toolCallCard({ id: part.tool_call_id, name: part.name, arguments: null }, part, null));
    } else if (part.type === "file") {
      nodes.push(h("p", { class: "file" }, `file (${part.media_type || "unknown type"})`));
    } else {
      nodes.push(h("pre", { class: "other" }, `${part.type}: ${pretty(part)}`));
    }
  }
  return nodes;
}

const ROLE_LABELS = { user: "You", assistant: "Assistant", tool: "Tool", system: "System" };

/** One message: `actions` are extra controls (the user's Edit). */
export function messageNode(message, results, decisions, actions = null) {
  const usage = message.usage
    ? `${message.usage.input_tokens} in / ${message.usage.output_tokens} out tokens`
    : "";
  return h(
    "li",
    {
      class: `message role-${message.role}${message.compressed ? " compressed" : ""}`,
      "data-message-id": message.id,
    },
    h(
      "div",
      { class: "message-head" },
      h("span", { class: "role" }, ROLE_LABELS[message.role] || message.role),
      h("time", { datetime: message.created_at || "" }, clock(message.created_at)),
      usage ? h("span", { class: "usage" }, usage) : null,
      message.compressed ? h("span", { class: "badge" }, "compacted (no longer sent)") : null,
      actions,
    ),
    h("div", { class: "message-body" }, partNodes(message, results, decisions)),
  );
}

/** The step streaming now: its deltas so far, by part. */
export function draftNode(draft) {
  const parts = [...draft.values()].map((p) =>
    p.type === "tool_call" ? { ...p, arguments: p.arguments || "" } : p,
  );
  const message = { role: "assistant", parts, id: "draft" };
  const node = messageNode(message, new Map(), new Map());
  node.classList.add("streaming");
  node.setAttribute("aria-busy", "true");
  return node;
}
