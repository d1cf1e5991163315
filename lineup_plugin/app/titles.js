// @ts-check
// The title of a card's notification, the same from the page (notify.js) and from a push (sw.js;
// the direct server sends the service worker with this module joined in, as a classic script).

/** @type {Readonly<Record<string, string>>} */
const TITLES = {
  choice: "The agent asks you to choose",
  confirm: "The agent asks for your approval",
  input: "The agent needs some details",
};

/**
 * What a notification of a card of tool `tool` says first.
 * @param {string} tool
 */
export function cardTitle(tool) {
  return TITLES[tool] ?? `The agent calls ${tool}`;
}
