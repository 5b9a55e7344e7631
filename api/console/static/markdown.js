// Markdown for untrusted text, escape-first: the text is never parsed as HTML. A small
// subset becomes DOM nodes built here (paragraphs, fenced code, inline code, bold, italic,
// lists, links to http(s) URLs only); everything else, raw HTML included, stays text.

import { h, textNodes } from "./dom.js";

const PLAIN_ABOVE = 200_000;
/** Longer texts are shown as plain text: formatting a megabyte on every delta would stall. */

const LIST_ITEM = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
const FENCE = /^\s{0,3}(```|~~~)/;
const HEADING = /^\s{0,3}#{1,6}\s+(.*)$/;
const MAX_DEPTH = 3;

/** A fragment of DOM nodes for `text`. */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  if (text.length > PLAIN_ABOVE) {
    fragment.append(h("p", { class: "plain" }, text));
    return fragment;
  }
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (FENCE.test(line)) {
      i = codeBlock(lines, i, fragment);
    } else if (!line.trim()) {
      i += 1;
    } else if (LIST_ITEM.test(line)) {
      i = list(lines, i, fragment);
    } else if (HEADING.test(line)) {
      fragment.append(h("p", { class: "heading" }, h("strong", {}, inline(HEADING.exec(line)[1]))));
      i += 1;
    } else {
      i = paragraph(lines, i, fragment);
    }
  }
  return fragment;
}

function codeBlock(lines, start, into) {
  const fence = FENCE.exec(lines[start])[1];
  const body = [];
  let i = start + 1;
  while (i < lines.length && !lines[i].trimStart().startsWith(fence)) {
    body.push(lines[i]);
    i += 1;
  }
  into.append(h("pre", { class: "code" }, h("code", {}, body.join("\n"))));
  return i + 1;
}

function list(lines, start, into) {
  const ordered = /\d/.test(LIST_ITEM.exec(lines[start])[1]);
  const el = h(ordered ? "ol" : "ul");
  let i = start;
  while (i < lines.length) {
    const match = LIST_ITEM.exec(lines[i]);
    if (!match || /\d/.test(match[1]) !== ordered) break;
    el.append(h("li", {}, inline(match[2])));
    i += 1;
  }
  into.append(el);
  return i;
}

function paragraph(lines, start, into) {
  const body = [];
  let i = start;
  while (
    i < lines.length &&
    lines[i].trim() &&
    !FENCE.test(lines[i]) &&
    !LIST_ITEM.test(lines[i]) &&
    !HEADING.test(lines[i])
  ) {
    body.push(lines[i]);
    i += 1;
  }
  into.append(h("p", {}, inline(body.join("\n"))));
  return i;
}

/** A searcher for `token` in `text` that never scans the same stretch twice while the
 * positions it is asked from only grow (the inline scan stays linear on hostile input). */
function finder(text, token) {
  let from = -1;
  let found = -1;
  return (at) => {
    if (from !== -1 && at >= from && (found === -1 || at <= found)) return found;
    from = at;
    found = text.indexOf(token, at);
    return found;
  };
}

/** A safe http(s) URL, or null. */
export function safeUrl(raw) {
  const trimmed = raw.trim();
  if (!/^https?:\/\//i.test(trimmed)) return null;
  try {
    const url = new URL(trimmed);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

/** Inline nodes of `text`: `code`, **bold**, *italic* / _italic_, [links](https://...). */
export function inline(text, depth = 0) {
  const nodes = [];
  const next = {
    tick: finder(text, "`"),
    close: finder(text, "]("),
    paren: finder(text, ")"),
    double: finder(text, "**"),
    star: finder(text, "*"),
    under: finder(text, "_"),
  };
  let plain = "";
  let i = 0;
  const flush = () => {
    if (plain) nodes.push(...textNodes(plain));
    plain = "";
  };
  while (i < text.length) {
    const match = depth < MAX_DEPTH ? inlineAt(text, i, next, depth) : null;
    if (match) {
      flush();
      nodes.push(match.node);
      i = match.end;
    } else {
      plain += text[i];
      i += 1;
    }
  }
  flush();
  return nodes;
}

function inlineAt(text, i, next, depth) {
  const c = text[i];
  if (c === "`") {
    const end = next.tick(i + 1);
    return end > i + 1 ? { node: h("code", {}, text.slice(i + 1, end)), end: end + 1 } : null;
  }
  if (c === "[") return link(text, i, next, depth);
  if (c === "*" && text[i + 1] === "*") {
    const end = next.double(i + 2);
    if (end > i + 2) {
      return { node: h("strong", {}, inline(text.slice(i + 2, end), depth + 1)), end: end + 2 };
    }
    return null;
  }
  if ((c === "*" || c === "_") && text[i + 1] && text[i + 1] !== " ") {
    const end = (c === "*" ? next.star : next.under)(i + 1);
    if (end > i + 1) {
      return { node: h("em", {}, inline(text.slice(i + 1, end), depth + 1)), end: end + 1 };
    }
  }
  return null;
}

function link(text, i, next, depth) {
  const close = next.close(i + 1);
  if (close === -1 || close - i > 1000 || text.slice(i + 1, close).includes("\n")) return null;
  const end = next.paren(close + 2);
  if (end === -1 || end - close > 2000) return null;
  const href = safeUrl(text.slice(close + 2, end));
  const label = text.slice(i + 1, close);
  if (!href || !label) return null;
  const node = h(
    "a",
    { href, target: "_blank", rel: "noopener noreferrer nofollow" },
    inline(label, depth + 1),
  );
  return { node, end: end + 1 };
}
