// @ts-check
// The feed (chat messages and cards, in order), the agent's status badge and the connection pill.
// A message is a bubble in a row; under the bubble, when it was sent and, for the user's own
// messages, whether it has reached the agent. The feed follows new messages while the user is at
// the bottom; scrolled up, it stays put and offers a jump to the newest.

import { dateTime, h } from "./dom.js";
import { attachmentList } from "./files.js";
import { renderMarkdown } from "./markdown.js";

const AGENT_STATE = {
  idle: "Idle",
  thinking: "Thinking…",
  waiting_input: "Waiting for you",
  running: "Working…",
  interrupted: "Interrupted",
  failed: "Failed",
};
const BUSY = new Set(["thinking", "waiting_input", "running"]);
/** How many replies are remembered by message id (a late piece of an older one is ignored). */
const REPLIES_KEPT = 500;
/** How near the bottom (px) counts as "at the newest message". */
const NEAR_BOTTOM = 48;
/** How near the top (px, at least) counts as "at the oldest message shown": older ones are asked for. */
const NEAR_TOP = 200;
/** What the line above the oldest message says while older ones load, and once there are none. */
const TOP_LINE = {
  loading: "Loading earlier messages…",
  start: "Beginning of the conversation",
};
const LINK_STATE = {
  connecting: "Connecting…",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  offline: "Offline",
};
/** What the mark under one of the user's messages says. */
const MARKS = {
  pending: "Sending…",
  sent: "",
  failed: "Not sent",
};

/**
 * @typedef {"pending" | "sent" | "failed"} Delivery
 * @typedef {{el: HTMLElement, body: HTMLElement, text: string, seq: number, settled: boolean}} Reply
 */

/**
 * A <time> for `at` (an ISO timestamp, a Date or a number): the time of day, with the date when it
 * is not today; null for anything that is not a time.
 * @param {unknown} at
 */
export function timeOf(at) {
  const when = at instanceof Date ? at : typeof at === "string" || typeof at === "number" ? new Date(at) : null;
  if (!when || Number.isNaN(when.getTime())) return null;
  const today = new Date().toDateString() === when.toDateString();
  const shown = today
    ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : dateTime(when);
  return h("time", { datetime: when.toISOString(), title: when.toLocaleString() }, shown);
}

export class Feed {
  /**
   * @param {HTMLElement} list holds the messages and cards
   * @param {HTMLElement} scroller the element that scrolls them
   */
  constructor(list, scroller) {
    this.list = list;
    this.scroller = scroller;
    /** @type {Map<string, Reply>} message_id → reply */
    this.replies = new Map();
    /** @type {((node: HTMLElement) => void) | null} called before an element is appended */
    this.onAdd = null;
    /** @type {Node | null | undefined} where add() puts elements while above() runs (undefined: at the end) */
    this.anchor = undefined;
    /** whether the view keeps to the newest message (the user has not scrolled up) */
    this.following = true;
    /** @type {(() => void) | null} called when the view is near the oldest message shown (see nearTop()) */
    this.onTop = null;
    this.top = h("p", { class: "feed-top", role: "status", "data-state": "" }); // its line is kept: nothing moves
    scroller.insertBefore(this.top, list); // above every message: "Loading earlier messages…"
    this.jump = h("button", { type: "button", class: "jump", hidden: true, onclick: () => this.toNewest() }, "↓ New messages");
    scroller.append(this.jump); // sticks to the bottom of the view
    let lastTop = 0;
    scroller.addEventListener("scroll", () => {
      const top = scroller.scrollTop;
      if (this.distance() < NEAR_BOTTOM) {
        this.following = true;
        this.jump.hidden = true;
      } else if (top < lastTop - 1) this.following = false; // the user went up (growing content moves nothing)
      lastTop = top;
      if (this.nearTop()) this.onTop?.();
    });
    // whatever grows (a message, a picture loading, a reply being written, the view shown at
    // last, the keyboard opening): keep to the newest message if the user was there
    const keep = () => this.following && this.toBottom();
    new ResizeObserver(keep).observe(list);
    new ResizeObserver(keep).observe(scroller);
  }

  distance() {
    const { scrollHeight, scrollTop, clientHeight } = this.scroller;
    return scrollHeight - scrollTop - clientHeight;
  }

  toBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /** Whether the view shows (or nearly) the oldest message shown: half a screen, at least NEAR_TOP px, from the top. */
  nearTop() {
    const { scrollTop, clientHeight } = this.scroller;
    return clientHeight > 0 && scrollTop < Math.max(NEAR_TOP, clientHeight / 2); // 0: not on screen
  }

  /**
   * What the line above the oldest message says: older ones are loading, there are none, or nothing.
   * @param {"loading" | "start" | ""} state
   */
  topLine(state) {
    this.top.textContent = state ? TOP_LINE[state] : "";
    this.top.dataset.state = state;
  }

  /** Show the newest message and follow again (opening a conversation, the jump button). */
  toNewest() {
    this.following = true;
    this.jump.hidden = true;
    this.toBottom();
  }

  /**
   * Append an element; the view follows if the user was at the newest message, else it offers the jump.
   * @param {HTMLElement} node
   */
  add(node) {
    this.onAdd?.(node); // e.g. tag it with its conversation
    if (this.anchor !== undefined) this.list.insertBefore(node, this.anchor); // above(): its place holds the view
    else {
      this.list.append(node);
      if (!this.following && !node.hidden) this.jump.hidden = false;
    }
    if (this.following) this.toBottom();
  }

  /**
   * Add what `show()` adds above everything shown so far (an older page of the history), in its
   * order — or right below element `after` (what was shown before a catch-up's newest page). What
   * the user looks at stays where it is on the screen.
   * @param {() => void} show
   * @param {Element | null} [after]
   */
  above(show, after = null) {
    const { scrollHeight, scrollTop } = this.scroller;
    /** @type {Node | null | undefined} */
    this.anchor = after?.parentNode === this.list ? after.nextSibling : this.list.firstChild;
    try {
      show();
    } finally {
      this.anchor = undefined;
    }
    if (!this.following) this.scroller.scrollTop = scrollTop + (this.scroller.scrollHeight - scrollHeight); // what was seen stays
  }

  /**
   * A chat message from "user" or "agent", or a "system" notice, with the files it carries; its
   * bubble. `at` is when it was sent (shown under the bubble). The agent's text is Markdown.
   * @param {"user" | "agent" | "system"} from
   * @param {string} text
   * @param {any[]} [files]
   * @param {{at?: unknown}} [options]
   */
  message(from, text, files = [], { at } = {}) {
    if (from === "system") {
      const notice = h("div", { class: "msg msg-system" }, h("p", {}, text));
      this.add(notice);
      return notice;
    }
    const body = h("div", { class: from === "agent" ? "msg-body md" : "msg-body" });
    if (from === "agent") renderMarkdown(body, text);
    else if (text) body.append(h("p", {}, text));
    const el = h("div", { class: `msg msg-${from}` }, text ? body : null);
    if (files.length) el.append(attachmentList(files));
    this.add(this.row(from, el, at));
    return el;
  }

  /**
   * The row of bubble `el`: the bubble, then its time and (for the user's) its delivery mark.
   * @param {string} from
   * @param {HTMLElement} el
   * @param {unknown} at
   */
  row(from, el, at) {
    const meta = h("div", { class: "msg-meta" }, timeOf(at ?? new Date()));
    return h("div", { class: `msg-row msg-row-${from}` }, el, meta);
  }

  /**
   * Mark one of the user's messages: pending (not yet taken by the agent), sent, or failed with
   * `why` and a Retry button calling `retry`.
   * @param {HTMLElement} bubble what message() returned
   * @param {Delivery} delivery
   * @param {{why?: string, retry?: () => void}} [options]
   */
  mark(bubble, delivery, { why, retry } = {}) {
    bubble.dataset.state = delivery;
    const meta = bubble.parentElement?.querySelector(".msg-meta");
    if (!meta) return;
    meta.querySelector(".msg-mark")?.remove();
    if (delivery === "sent") return;
    const mark = h("span", { class: "msg-mark", role: delivery === "failed" ? "alert" : null }, MARKS[delivery]);
    if (why) mark.append(`: ${why}`);
    if (delivery === "failed" && retry) mark.append(" ", h("button", { type: "button", class: "retry", onclick: retry }, "Retry"));
    meta.append(mark);
  }

  /**
   * The bubble of agent reply `messageId`, made (empty, being written) the first time.
   * @param {string} messageId
   * @param {unknown} [at]
   */
  reply(messageId, at) {
    let reply = this.replies.get(messageId);
    if (!reply) {
      const body = h("div", { class: "msg-body md" });
      const el = h("div", { class: "msg msg-agent", "data-message-id": messageId }, body);
      reply = { el, body, text: "", seq: 0, settled: false };
      this.replies.set(messageId, reply);
      if (this.replies.size > REPLIES_KEPT) this.replies.delete(this.replies.keys().next().value);
      this.add(this.row("agent", el, at));
    }
    return reply;
  }

  /**
   * A piece of an agent reply still being written (message.delta): the bubble grows.
   * @param {{message_id: string, seq: number, text: string, replace?: boolean}} delta
   * @param {unknown} [at]
   */
  delta({ message_id: messageId, seq, text, replace }, at) {
    const reply = this.reply(messageId, at);
    if (reply.settled || seq < reply.seq) return; // late or repeated: the settled text is the truth
    reply.el.dataset.state = "streaming";
    reply.el.setAttribute("aria-busy", "true");
    reply.text = replace ? text : reply.text + text;
    renderMarkdown(reply.body, reply.text);
    reply.seq = seq + 1;
  }

  /**
   * An agent message (text): it settles the reply of the same message_id, marked if interrupted.
   * @param {{message_id?: string, text: string, interrupted?: boolean, attachments?: any[]}} message
   * @param {unknown} [at]
   */
  agentText({ message_id: messageId, text, interrupted, attachments }, at) {
    const files = attachments ?? [];
    if (!messageId) {
      this.message("agent", text, files, { at });
      return;
    }
    const reply = this.reply(messageId, at);
    reply.settled = true;
    reply.text = text;
    renderMarkdown(reply.body, text);
    reply.el.dataset.state = interrupted ? "interrupted" : "settled";
    reply.el.removeAttribute("aria-busy");
    for (const old of reply.el.querySelectorAll(".attachments, .msg-note")) old.remove();
    if (files.length) reply.el.append(attachmentList(files));
    if (interrupted) reply.el.append(h("span", { class: "msg-note" }, "Interrupted — the reply stopped here."));
  }
}

/**
 * Show the agent's state in `badge`; offer `stop` while the agent is busy.
 * @param {HTMLElement} badge
 * @param {HTMLElement} stop
 * @param {{state: string, detail?: string}} status
 */
export function showAgentStatus(badge, stop, { state, detail }) {
  badge.dataset.state = state;
  badge.textContent = AGENT_STATE[state] ?? state;
  badge.title = detail ?? "";
  stop.hidden = !BUSY.has(state);
}

/**
 * Show the connection state in `pill`.
 * @param {HTMLElement} pill
 * @param {string} state
 */
export function showLink(pill, state) {
  pill.dataset.state = state;
  pill.textContent = LINK_STATE[state] ?? state;
}
