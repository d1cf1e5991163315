// @ts-check
// The agent's replies as Markdown, safely: markdown-it (vendor/markdown.js, loaded the first time a
// reply is drawn, never before: a page with no reply yet, and the first card, do without it) parses the text with raw HTML off, and its tokens become elements here, by
// document.createElement and textContent only. What is drawn: paragraphs, line breaks, emphasis,
// lists, quotes, code, tables and links (http, https and mailto only; they open in a new tab
// with rel=noopener). Raw HTML and pictures stay text; other link schemes (javascript:, data:,
// ...) stay text. Until the library has loaded, a reply shows as plain text, and so does a reply
// nested deeper than markdown-it goes (it would drop the rest).

import { h } from "./dom.js";

/** @type {any} a markdown-it instance, once vendor/markdown.js has loaded */
let parser = null;
/** @type {Promise<void> | null} */
let loading = null;
/** the text each element is to show once the library has loaded (the newest wins) */
const waiting = new WeakMap();

/** Elements for markdown-it's block and inline tokens (`heading` is drawn as a bold paragraph). */
const TAGS = {
  paragraph: "p",
  heading: "p",
  bullet_list: "ul",
  ordered_list: "ol",
  list_item: "li",
  blockquote: "blockquote",
  table: "table",
  thead: "thead",
  tbody: "tbody",
  tr: "tr",
  th: "th",
  td: "td",
  strong: "strong",
  em: "em",
  s: "s",
  link: "a",
};
const SAFE_LINK = /^(https?:|mailto:)/i;

/** Start loading the parser (once); resolves when replies can be drawn as Markdown. */
function markdownReady() {
  loading ??= import("./vendor/markdown.js").then(
    (/** @type {any} the bundle is not typed */ bundle) => {
      parser = new bundle.MarkdownIt({ html: false, linkify: true, breaks: true, typographer: false }).disable(["image"]);
      parser.linkify.set({ fuzzyLink: false }); // "main.py" is a file name, not a site in Paraguay: links need a scheme or www.
    },
    () => {
      // not loaded (offline, an old cache): replies stay plain text
    },
  );
  return loading;
}

/**
 * Draw `text` as Markdown into `target` (its children are replaced).
 * @param {HTMLElement} target
 * @param {string} text
 */
export function renderMarkdown(target, text) {
  if (!parser) {
    target.replaceChildren(h("p", {}, text));
    const first = !waiting.has(target);
    waiting.set(target, text);
    if (first) markdownReady().then(() => parser && renderMarkdown(target, waiting.get(target)));
    return;
  }
  waiting.delete(target);
  const tokens = parser.parse(text, {});
  // nested as deep as markdown-it goes, it drops the rest of the text: then the whole reply is plain text
  const deepest = parser.options.maxNesting - 1;
  if (tokens.some((/** @type {any} */ token) => token.level >= deepest)) target.replaceChildren(h("p", {}, text));
  else target.replaceChildren(...build(tokens));
}

/**
 * Elements of a token list (block tokens, or the children of an inline token).
 * @param {any[]} tokens
 * @returns {Node[]}
 */
function build(tokens) {
  const root = document.createDocumentFragment();
  /** @type {(Node & ParentNode)[]} */
  const stack = [root];
  for (const token of tokens) {
    const parent = stack[stack.length - 1];
    if (token.nesting === 1) {
      const el = token.hidden ? parent : open(token);
      if (el !== parent) parent.append(el);
      stack.push(el);
    } else if (token.nesting === -1) {
      if (stack.length > 1) stack.pop();
    } else {
      parent.append(...leaf(token));
    }
  }
  return [...root.childNodes];
}

/**
 * The element a `*_open` token opens.
 * @param {any} token
 */
function open(token) {
  const name = token.type.replace(/_open$/, "");
  const tag = Object.hasOwn(TAGS, name) ? TAGS[name] : "span";
  if (tag === "a") {
    const href = String(token.attrGet("href") ?? "");
    if (!SAFE_LINK.test(href)) return h("span", {});
    return h("a", { href, target: "_blank", rel: "noopener noreferrer", title: token.attrGet("title") || null });
  }
  if (name === "heading") return h("p", { class: "md-heading" });
  if (name === "table") return h("table", { class: "md-table" });
  const given = name === "ordered_list" ? token.attrGet("start") : null; // "3." starts at 3; "1." says nothing
  const start = given === null ? NaN : Number(given);
  return h(tag, { start: Number.isSafeInteger(start) && start !== 1 ? start : null });
}

/**
 * The nodes of a token that opens nothing.
 * @param {any} token
 * @returns {Node[]}
 */
function leaf(token) {
  switch (token.type) {
    case "inline":
      return build(token.children ?? []);
    case "softbreak":
    case "hardbreak":
      return [h("br", {})];
    case "code_inline":
      return [h("code", {}, token.content)];
    case "fence":
    case "code_block":
      return [h("pre", { class: "md-code" }, h("code", {}, token.content.replace(/\n$/, "")))];
    case "hr":
      return [h("hr", {})];
    default:
      return token.content ? [document.createTextNode(token.content)] : [];
  }
}
