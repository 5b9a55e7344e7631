// The console's shell: sign in and out, the chat list beside the open chat, hash routes
// (#/chats/<id>, #/new) that never carry the key.

import { forgetKey, keyWorks, storedKey, storeKey, whenUnauthorized } from "./api.js";
import { ChatList } from "./chats.js";
import { ChatView } from "./chat.js";
import { h, replace } from "./dom.js";
import { NewChatForm } from "./new_chat.js";

const root = document.getElementById("app");
let config = { temporal_ui_url: null, namespace: "default", mcp_servers: [], model_aliases: {} };
let shell = null;

async function loadConfig() {
  try {
    const response = await fetch("config.json", { cache: "no-store" });
    if (response.ok) config = { ...config, ...(await response.json()) };
  } catch {
    // The console works without it: no Temporal UI links, no suggestions.
  }
}

function signInView(message = "") {
  shell?.close();
  shell = null;
  const input = h("input", {
    id: "api-key",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
  });
  const error = h("p", { class: "error", role: "alert" }, message);
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { class: "sign-in", "aria-label": "Sign in" },
    h("h1", {}, "chatd console"),
    h("label", { for: "api-key" }, "API key"),
    input,
    button,
    error,
    h("p", { class: "hint" }, "The key stays in this tab (sessionStorage) and is sent only as a bearer token."),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    button.disabled = true;
    replace(error);
    try {
      if (await keyWorks(key)) {
        storeKey(key);
        input.value = "";
        mainView();
      } else {
        replace(error, "That key was refused.");
      }
    } catch (err) {
      replace(error, `Could not sign in: ${err.message}`);
    } finally {
      button.disabled = false;
    }
  });
  replace(root, form);
  input.focus();
}

function signOut(message = "") {
  forgetKey();
  if (location.hash) history.replaceState(null, "", location.pathname);
  signInView(message);
}

class Shell {
  constructor() {
    this.connection = h("span", { class: "connection", role: "status", "aria-live": "polite" });
    this.view = h("section", { class: "view", "aria-label": "Chat view" });
    this.list = new ChatList(config, (state) => this.showState("chats", state));
    this.states = {};
    this.current = null;
    const header = h(
      "header",
      { class: "top" },
      h("span", { class: "brand" }, "chatd console"),
      this.connection,
      h("button", { type: "button", class: "secondary", onclick: () => signOut() }, "Sign out"),
    );
    const aside = h(
      "aside",
      { class: "side" },
      h("button", { type: "button", onclick: () => (location.hash = "#/new") }, "New chat"),
      this.list.element,
    );
    replace(root, header, h("div", { class: "body" }, aside, this.view));
    this.onHash = () => this.route();
    window.addEventListener("hashchange", this.onHash);
    this.route();
  }

  showState(which, state) {
    this.states[which] = state;
    const reconnecting = Object.values(this.states).includes("reconnecting");
    replace(this.connection, reconnecting ? "reconnecting…" : "live");
    this.connection.classList.toggle("warn", reconnecting);
  }

  route() {
    this.current?.close();
    this.current = null;
    delete this.states.chat;
    const hash = location.hash;
    const chat = /^#\/chats\/([0-9a-f-]{36})$/.exec(hash);
    if (chat) {
      this.list.select(chat[1]);
      this.current = new ChatView(chat[1], config, {
        onState: (state) => this.showState("chat", state),
        onChat: (summary) => this.list.upsert(summary),
      });
      replace(this.view, this.current.element);
    } else if (hash === "#/new") {
      this.list.select(null);
      this.current = new NewChatForm(config, (id) => (location.hash = `#/chats/${id}`));
      replace(this.view, this.current.element);
      this.current.focus();
    } else {
      this.list.select(null);
      replace(
        this.view,
        h("p", { class: "empty" }, "Pick a chat on the left, or start a new one."),
      );
    }
  }

  close() {
    window.removeEventListener("hashchange", this.onHash);
    this.current?.close();
    this.list.close();
  }
}

function mainView() {
  shell?.close();
  shell = new Shell();
}

whenUnauthorized(() => signOut("The key was refused: sign in again."));
await loadConfig();
if (storedKey()) mainView();
else signInView();
