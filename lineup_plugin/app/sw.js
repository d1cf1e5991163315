// @ts-check
// The App's service worker: Web Push from the agent shows one notification per waiting card, a
// click opens the App on that card, and a follow-up push closes the notification of a card that
// was answered, cancelled or expired elsewhere. It caches nothing and fetches nothing: the page
// talks to the agent itself.
//
// A push's data is the agent's JSON notice, padded with spaces (which JSON ignores):
//   {"v": 1, "kind": "card", "call_id", "tool"?, "text"?, "conversation_id"?}  (no tool/text: preview off)
//   {"v": 1, "kind": "closed", "call_id"}
//
// A service worker runs as a classic script (not every browser takes a module one): the direct
// server sends this file with the modules it imports joined in (see transports/direct/static.py),
// and `lineup app export` writes it so.

import { cardTitle } from "./titles.js";

/** the worker's global scope (the App's type check knows the page's, not a worker's) */
const worker = /** @type {any} */ (self);
const PRIVATE_TITLE = "A card is waiting";
// PNG, not icon.svg: Android's Chrome may draw no SVG in a notification; the badge (status bar) is
// a white mark on transparent, as Android draws a badge from its alpha only
const ICON = "icon-192.png";
const BADGE = "badge-96.png";
const PRIVATE_BODY = "Open LineUp to see what the agent asks.";

worker.addEventListener("install", () => worker.skipWaiting());
worker.addEventListener("activate", (/** @type {any} */ event) => event.waitUntil(worker.clients.claim()));

/**
 * The notice a push carries, or null when it is not one of ours.
 * @param {any} event
 */
function notice(event) {
  try {
    const data = event.data?.json();
    return data && data.v === 1 && typeof data.call_id === "string" ? data : null;
  } catch {
    return null;
  }
}

/** @param {string} callId */
async function closeCard(callId) {
  const shown = await worker.registration.getNotifications({ tag: callId });
  for (const notification of shown) notification.close();
}

/** @param {any} data */
async function showCard(data) {
  const preview = typeof data.tool === "string";
  const title = preview ? cardTitle(data.tool) : PRIVATE_TITLE;
  const body = preview ? String(data.text ?? "").slice(0, 300) : PRIVATE_BODY;
  await worker.registration.showNotification(title, {
    body,
    tag: data.call_id, // one notification per card: a repeat replaces it, a close finds it
    icon: ICON,
    badge: BADGE,
    requireInteraction: true,
    data: { call_id: data.call_id, conversation_id: data.conversation_id ?? null },
  });
}

worker.addEventListener("push", (/** @type {any} */ event) => {
  const data = notice(event);
  if (!data) return;
  event.waitUntil(data.kind === "closed" ? closeCard(data.call_id) : data.kind === "card" ? showCard(data) : Promise.resolve());
});

/**
 * Open the App on the card: a window of it is focused and told which card; else a new one opens at it.
 * @param {string} callId
 */
async function openCard(callId) {
  const windows = await worker.clients.matchAll({ type: "window", includeUncontrolled: true });
  const app = windows.find((/** @type {any} */ client) => client.focused) ?? windows[0];
  if (app) {
    app.postMessage({ type: "lineup.open-card", call_id: callId });
    try {
      await app.focus();
    } catch {
      // focusing needs the click's user activation; the card is shown to whoever looks next
    }
    return;
  }
  await worker.clients.openWindow(`./#card=${encodeURIComponent(callId)}`);
}

worker.addEventListener("notificationclick", (/** @type {any} */ event) => {
  const callId = event.notification.data?.call_id ?? event.notification.tag;
  event.notification.close();
  if (typeof callId === "string" && callId) event.waitUntil(openCard(callId));
});
