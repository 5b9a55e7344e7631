// Building DOM nodes without HTML: every string becomes a text node, never markup.

/** An element: `attrs` set as properties or attributes (never `innerHTML`), `children`
 * appended (strings as text nodes; null and false skipped). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "innerHTML" || name === "outerHTML") throw new Error("no HTML here");
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      el.className = value;
    } else if (name === "value" || name === "checked" || name === "disabled") {
      el[name] = value;
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

const TEXT_RUN = 500;

/** `text` as text nodes of at most TEXT_RUN characters (a surrogate pair never split). The
 * browser lays out a long unbroken word in time that grows with its text node's length, so a
 * 300,000-character line in one node takes seconds each time it is shown; in short nodes it
 * looks and copies the same and costs a fraction of that. */
export function textNodes(text) {
  if (text.length <= TEXT_RUN) return [document.createTextNode(text)];
  const nodes = [];
  let start = 0;
  while (start < text.length) {
    let end = Math.min(start + TEXT_RUN, text.length);
    const code = text.charCodeAt(end - 1);
    if (end < text.length && code >= 0xd800 && code <= 0xdbff) end += 1;
    nodes.push(document.createTextNode(text.slice(start, end)));
    start = end;
  }
  return nodes;
}

/** Append `children` (nested arrays flattened) to `el`. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    if (child instanceof Node) el.append(child);
    else for (const node of textNodes(String(child))) el.append(node);
  }
  return el;
}

/** Replace `el`'s children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A short, human time: "12:03:07". */
export function clock(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString();
}

/** "1.2 s", "340 ms". */
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.max(0, Math.round(ms))} ms`;
}

/** Dollars to the hundredth of a cent: "$0.0030" (a step costs fractions of a cent). */
export function usd(value) {
  return Number.isFinite(value) ? `$${value.toFixed(4)}` : "";
}

/** A cost `{usd, estimated}`: "$0.0030", or "≈$0.0030" when part of it is an estimate. */
export function costText(cost) {
  if (!cost) return "";
  return `${cost.estimated ? "≈" : ""}${usd(cost.usd)}`;
}

/** JSON for people: strings as they are, the rest indented. */
export function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

/** A random id (for Idempotency-Key): crypto.randomUUID where the page is a secure context. */
export function newId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  return [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
}
