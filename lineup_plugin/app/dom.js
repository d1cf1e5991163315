// @ts-check
// Tiny DOM helpers. Agent-supplied text only ever goes through textContent, never innerHTML.

/**
 * Create an element: h("button", {class: "primary", type: "button", onclick: fn}, "Label", child...).
 * Attributes whose value is false/null/undefined are left out; "on*" keys become event listeners.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** Create an SVG element with attributes. */
export function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) el.setAttribute(key, String(value));
  }
  return el;
}

let counter = 0;

/** A page-unique element id, for label/for and aria-describedby. */
export function uid(prefix = "el") {
  counter += 1;
  return `${prefix}-${counter}`;
}

/**
 * `when` with its date, short, in the user's locale (e.g. "Dec 2, 03:25 PM"): how the feed shows a
 * time that is not today's.
 * @param {Date} when
 */
export function dateTime(when) {
  return when.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}
