// The new-chat form: model (providers and the operator's aliases), tool policy, MCP servers,
// subagents, client tools and an optional first message.

import { request } from "./api.js";
import { h, newId, replace } from "./dom.js";

const SUGGESTED = ["demo/demo", "anthropic/claude-sonnet-4-5", "openai/gpt-5", "google/gemini-2.5-flash"];

function field(id, label, control, hint = "") {
  control.id = id;
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    control,
    hint ? h("small", { class: "hint" }, hint) : null,
  );
}

function parseJson(text, what, expect) {
  if (!text.trim()) return undefined;
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`${what} is not valid JSON: ${err.message}`);
  }
  if (expect === "object" && (typeof value !== "object" || value === null || Array.isArray(value))) {
    throw new Error(`${what} must be a JSON object`);
  }
  if (expect === "array" && !Array.isArray(value)) throw new Error(`${what} must be a JSON array`);
  return value;
}

export function modelConfig(text, aliases) {
  const name = text.trim();
  const target = aliases[name] || name;
  const slash = target.indexOf("/");
  if (slash <= 0 || slash === target.length - 1) {
    throw new Error("Model must be provider/name (for example demo/demo) or an alias");
  }
  return { provider: target.slice(0, slash), name: target.slice(slash + 1) };
}

export class NewChatForm {
  constructor(config, onCreated) {
    const aliases = config.model_aliases || {};
    const options = [...Object.keys(aliases), ...SUGGESTED];
    this.model = h("input", { list: "model-options", value: "demo/demo", autocomplete: "off" });
    this.title = h("input", { autocomplete: "off" });
    this.system = h("textarea", { rows: 2 });
    this.policy = h("textarea", { rows: 2, placeholder: '{"write_file": "ask"}' });
    this.tools = h("textarea", {
      rows: 3,
      placeholder: '[{"name": "ask_user", "description": "...", "input_schema": {"type": "object"}}]',
    });
    this.subagents = h("input", { type: "checkbox" });
    this.message = h("textarea", { rows: 3 });
    this.servers = (config.mcp_servers || []).map((name) =>
      h("label", { class: "check" }, h("input", { type: "checkbox", value: name }), ` ${name}`),
    );
    this.error = h("p", { class: "error", role: "alert" });
    this.submit = h("button", { type: "submit" }, "Create chat");
    this.element = h(
      "form",
      { class: "new-chat", "aria-label": "New chat", onsubmit: (e) => this.create(e, aliases, onCreated) },
      h("h2", {}, "New chat"),
      h("datalist", { id: "model-options" }, options.map((o) => h("option", { value: o }))),
      field("new-model", "Model", this.model, "provider/name, or an alias"),
      field("new-title", "Title", this.title),
      field("new-system", "System prompt", this.system),
      field("new-policy", "Tool policy (JSON)", this.policy, "tool name or glob: auto, ask or deny"),
      this.servers.length
        ? h("fieldset", {}, h("legend", {}, "MCP servers"), this.servers)
        : null,
      h("label", { class: "check" }, this.subagents, " Subagents (the model may spawn agents)"),
      field("new-tools", "Client tools (JSON)", this.tools, "tools your client answers"),
      field("new-message", "First message", this.message),
      this.submit,
      this.error,
    );
  }

  focus() {
    this.model.focus();
  }

  async create(event, aliases, onCreated) {
    event.preventDefault();
    replace(this.error);
    let body;
    try {
      body = { model: modelConfig(this.model.value, aliases), subagents: this.subagents.checked };
      const policy = parseJson(this.policy.value, "Tool policy", "object");
      const tools = parseJson(this.tools.value, "Client tools", "array");
      if (policy) body.tool_policy = policy;
      if (tools) body.dynamic_tools = tools;
      if (this.title.value.trim()) body.title = this.title.value.trim();
      if (this.system.value.trim()) body.system_prompt = this.system.value;
      const servers = this.servers.map((l) => l.querySelector("input")).filter((i) => i.checked);
      if (servers.length) body.mcp_servers = servers.map((i) => i.value);
      if (this.message.value.trim()) body.message = { content: this.message.value };
    } catch (err) {
      replace(this.error, err.message);
      return;
    }
    this.submit.disabled = true;
    try {
      const chat = await request("POST", "/chats", body, { "Idempotency-Key": newId() });
      onCreated(chat.id);
    } catch (err) {
      replace(this.error, `${err.status || ""} ${err.code || ""}: ${err.message}`);
    } finally {
      this.submit.disabled = false;
    }
  }

  close() {}
}
