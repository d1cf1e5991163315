// @ts-check
// Hearing about a waiting card. Two ways, asked for once from the bell (never on load), after the
// hint has said why:
// - Web Push: the agent pushes each waiting card through the browser's push service, end-to-end
//   encrypted, and the service worker (sw.js) shows it even with the App closed or the phone
//   locked. Needs a secure context (HTTPS or localhost), a service worker and the Push API; on
//   iPhone and iPad the App must be added to the Home Screen (iOS 16.4 or later).
// - In the page: a card that arrives while the App is open in the background is notified by the
//   page itself (the agent does not push a card the App shows).
// When the agent pushes but this browser cannot receive it, the App says why, once a session.

import { cardTitle } from "./titles.js";

const TOLD_KEY = "lineup.push.told";

/**
 * Why Web Push cannot reach this App here, or "" when it can.
 * @param {any} [env] the page's global object
 */
export function pushProblem(env = globalThis) {
  /** @type {any} */
  const nav = env.navigator ?? {};
  const apple = /iPhone|iPad|iPod/.test(nav.userAgent ?? "") || (nav.platform === "MacIntel" && nav.maxTouchPoints > 1);
  const installed = env.matchMedia?.("(display-mode: standalone)")?.matches || nav.standalone === true;
  if (!env.isSecureContext) {
    return "Notifications with the App closed need HTTPS: open the App by an https:// address (or as localhost on the agent's machine). See “Hear about a waiting card” in the docs.";
  }
  if (apple && !installed && !("PushManager" in env)) {
    return "On iPhone and iPad, notifications need the App on the Home Screen: tap Share → Add to Home Screen, then open LineUp from there (iOS 16.4 or later).";
  }
  if (!("serviceWorker" in nav) || !("PushManager" in env)) {
    return "This browser cannot receive push notifications: you are notified only while the App is open.";
  }
  return "";
}

/** The agent's key as `pushManager.subscribe` takes it. */
function keyBytes(key) {
  const base64 = key.replace(/-/g, "+").replace(/_/g, "/");
  const text = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}

function base64url(buffer) {
  return btoa(String.fromCharCode(...new Uint8Array(buffer))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** What the agent keeps of a subscription (some Safari versions give no `toJSON`). */
function asJson(subscription) {
  if (typeof subscription.toJSON === "function") return subscription.toJSON();
  return {
    endpoint: subscription.endpoint,
    keys: { p256dh: base64url(subscription.getKey("p256dh")), auth: base64url(subscription.getKey("auth")) },
  };
}

function sameKey(subscription, key) {
  const held = subscription.options?.applicationServerKey;
  if (!held) return false;
  const want = keyBytes(key);
  const have = new Uint8Array(held);
  return have.length === want.length && have.every((byte, i) => byte === want[i]);
}

/**
 * @typedef {object} NotifierHooks
 * @property {(kind: string, payload: object) => unknown} [send] reaches the agent
 * @property {(text: string) => unknown} [tell] says something in the feed
 * @property {(callId: string) => boolean} [openCard] shows a card (a notification was clicked); false: not here yet
 */

/** The bell `button` with its explanation `hint`, and the hooks into the App. */
export class Notifier {
  /**
   * @param {HTMLElement} button
   * @param {HTMLElement} hint
   * @param {NotifierHooks} [hooks]
   */
  constructor(button, hint, { send = () => {}, tell = () => {}, openCard = () => false } = {}) {
    this.button = button;
    this.hint = hint;
    this.send = send;
    this.tell = tell;
    this.openCard = openCard;
    this.supported = typeof Notification !== "undefined";
    this.problem = pushProblem();
    /** the agent's push key (from the welcome); null: the agent sends no push */
    this.agentKey = null;
    /** notifications the page showed, by call id (closed when the card ends) */
    this.shown = new Map();
    this.registration = null;
    /** the service worker's registration once it is ready (used within a click, where awaiting would be too late) */
    this.ready = null;
    /** the card a notification asked to open (``#card=<call id>``, from sw.js), until it is shown */
    this.wanted = new URLSearchParams(location.hash.replace(/^#/, "")).get("card");
    if (this.wanted) history.replaceState(history.state, "", location.pathname + location.search);
    button.addEventListener("click", () => this.ask());
    if (!this.problem) this.register();
    this.refresh();
  }

  /** Install the service worker (no permission is asked); it tells the page which card a click opens. */
  register() {
    navigator.serviceWorker.addEventListener("message", (event) => {
      if (event.data?.type === "lineup.open-card" && typeof event.data.call_id === "string") {
        this.open(event.data.call_id);
      }
    });
    this.registration = navigator.serviceWorker
      .register("sw.js")
      .then(() => navigator.serviceWorker.ready)
      .then((registration) => (this.ready = registration))
      .catch((error) => {
        this.problem = `Notifications with the App closed are off: the service worker could not start (${error.message}).`;
        return null;
      });
  }

  /** The bell and its hint: offered while permission is still to ask; without notifications at all, why. */
  refresh() {
    const ask = this.supported && Notification.permission === "default";
    this.button.hidden = !ask;
    this.hint.hidden = !ask && (this.supported || !this.problem);
    if (ask) {
      this.hint.textContent =
        "“Notify” lets the agent reach you when it asks you something while this App is in the background" +
        (this.problem ? `, as long as it stays open. ${this.problem} ` : ", closed, or the phone is locked. ") +
        "Your browser asks you once.";
    } else if (!this.hint.hidden) {
      this.hint.textContent = this.problem; // e.g. iOS outside the Home Screen has no notifications at all
    }
  }

  /** The bell was pressed: ask for permission (Safari asks only when subscribing in the click itself). */
  async ask() {
    if (!this.supported) return;
    try {
      if (this.ready && this.agentKey && !this.problem) {
        await this.ready.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(this.agentKey) });
      }
    } catch {
      // refused, or not possible here: the permission question below says the rest
    }
    try {
      if (Notification.permission === "default") await Notification.requestPermission();
    } finally {
      this.refresh();
    }
    await this.subscribe();
  }

  /** The agent welcomed this App: `push_key` is its push key (none: it sends no push). */
  async welcome(payload) {
    this.agentKey = typeof payload?.push_key === "string" && payload.push_key ? payload.push_key : null;
    await this.subscribe();
  }

  /** With permission, make sure the agent has this browser's subscription for its key (again on every welcome). */
  async subscribe() {
    if (!this.supported || !this.agentKey) return; // no key: push is off
    if (Notification.permission === "denied") return this.send("push.subscribe", { subscription: null }); // taken back
    if (Notification.permission !== "granted") return;
    if (this.problem) return this.once(this.problem);
    const registration = await this.registration;
    if (!registration) return this.once(this.problem);
    try {
      let subscription = await registration.pushManager.getSubscription();
      if (subscription && !sameKey(subscription, this.agentKey)) {
        await subscription.unsubscribe(); // made for another agent's key: its pushes would be refused
        subscription = null;
      }
      subscription ??= await registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: keyBytes(this.agentKey),
      });
      this.send("push.subscribe", { subscription: asJson(subscription) });
    } catch (error) {
      this.once(`Notifications with the App closed are off: the browser refused to subscribe (${error.message}).`);
    }
  }

  /** Say `text` in the feed, once per browser session. */
  once(text) {
    if (!text || sessionStorage.getItem(TOLD_KEY) === text) return;
    sessionStorage.setItem(TOLD_KEY, text);
    this.tell(text);
  }

  /** Show the card `callId` (a notification was clicked); kept for later if it has not arrived yet. */
  open(callId) {
    this.wanted = this.openCard(callId) ? null : callId;
  }

  /** A card arrived: notify from the page if the App is not visible and the user allowed it. */
  card(call) {
    if (this.wanted === call.call_id) queueMicrotask(() => this.open(call.call_id));
    if (!this.supported || document.visibilityState !== "hidden" || Notification.permission !== "granted") return;
    const args = call.arguments ?? {};
    const body = String(args.question ?? args.message ?? args.prompt ?? args.title ?? call.name ?? "").slice(0, 200);
    const notification = new Notification(cardTitle(call.name), {
      body,
      tag: call.call_id, // one notification per card, even when it is re-sent
      icon: "icon-192.png", // PNG, as the service worker's (sw.js): Android may draw no SVG there
      badge: "badge-96.png",
    });
    this.shown.set(call.call_id, notification);
    notification.onclick = () => {
      window.focus();
      notification.close();
      this.open(call.call_id);
    };
  }

  /** A card ended (answered here or elsewhere, cancelled, expired): its notification goes. */
  settled(callId) {
    this.shown.get(callId)?.close();
    this.shown.delete(callId);
    this.registration
      ?.then((registration) => registration?.getNotifications({ tag: callId }))
      .then((notifications) => notifications?.forEach((notification) => notification.close()))
      .catch(() => {});
  }
}
