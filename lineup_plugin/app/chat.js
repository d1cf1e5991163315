// @ts-check
// The feed (chat messages and cards, in order), the agent's status badge and the connection pill.

import { h } from "./dom.js";
import { attachmentList } from "./files.js";

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
const LINK_STATE = {
  connecting: "Connecting…",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  offline: "Offline",
};

export class Feed {
  /** `list` holds the messages and cards; `scroller` is the element that scrolls them. */
  constructor(list, scroller) {
    this.list = list;
    this.scroller = scroller;
    this.replies = new Map(); // message_id → {el, p, seq, settled}
    /** @type {((node: HTMLElement) => void) | null} called before an element is appended */
    this.onAdd = null;
  }

  /** Append an element (or put it above, see above()), keeping the view at the bottom if the user was there. */
  add(node) {
    const { scrollHeight, scrollTop, clientHeight } = this.scroller;
    const atBottom = scrollHeight - scrollTop - clientHeight < 80;
    this.onAdd?.(node); // e.g. tag it with its conversation
    if (this.anchor !== undefined) {
      this.list.insertBefore(node, this.anchor);
      if (!atBottom) this.scroller.scrollTop = scrollTop + (this.scroller.scrollHeight - scrollHeight); // what was seen stays
    } else this.list.append(node);
    if (atBottom) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /** Add what `show()` adds above everything shown so far (an older page of the history), in its order. */
  above(show) {
    /** @type {Node | null | undefined} */
    this.anchor = this.list.firstChild;
    try {
      show();
    } finally {
      this.anchor = undefined;
    }
  }

  /** A chat message from "user" or "agent", or a "system" notice, with the files it carries; its element. */
  message(from, text, files = []) {
    const el = h("div", { class: `msg msg-${from}` }, text ? h("p", {}, text) : null);
    if (files.length) el.append(attachmentList(files));
    this.add(el);
    return el;
  }

  /** The bubble of agent reply `messageId`, made (empty, being written) the first time. */
  reply(messageId) {
    let reply = this.replies.get(messageId);
    if (!reply) {
      const p = h("p", {});
      const el = h("div", { class: "msg msg-agent", "data-message-id": messageId }, p);
      reply = { el, p, seq: 0, settled: false };
      this.replies.set(messageId, reply);
      if (this.replies.size > REPLIES_KEPT) this.replies.delete(this.replies.keys().next().value);
      this.add(el);
    }
    return reply;
  }

  /** A piece of an agent reply still being written (message.delta): the bubble grows. */
  delta({ message_id: messageId, seq, text, replace }) {
    const reply = this.reply(messageId);
    if (reply.settled || seq < reply.seq) return; // late or repeated: the settled text is the truth
    reply.el.dataset.state = "streaming";
    reply.el.setAttribute("aria-busy", "true");
    reply.p.textContent = replace ? text : reply.p.textContent + text;
    reply.seq = seq + 1;
    this.follow();
  }

  /** An agent message (text): it settles the reply of the same message_id, marked if interrupted. */
  agentText({ message_id: messageId, text, interrupted, attachments }) {
    const files = attachments ?? [];
    if (!messageId) {
      this.message("agent", text, files);
      return;
    }
    const reply = this.reply(messageId);
    reply.settled = true;
    reply.p.textContent = text;
    reply.el.dataset.state = interrupted ? "interrupted" : "settled";
    reply.el.removeAttribute("aria-busy");
    for (const old of reply.el.querySelectorAll(".attachments, .msg-note")) old.remove();
    if (files.length) reply.el.append(attachmentList(files));
    if (interrupted) reply.el.append(h("span", { class: "msg-note" }, "Interrupted — the reply stopped here."));
    this.follow();
  }

  /** Keep the view at the bottom while the last message grows, if the user was there. */
  follow() {
    const { scrollHeight, scrollTop, clientHeight } = this.scroller;
    if (scrollHeight - scrollTop - clientHeight < 160) this.scroller.scrollTop = scrollHeight;
  }
}

/** Show the agent's state in `badge`; offer `stop` while the agent is busy. */
export function showAgentStatus(badge, stop, { state, detail }) {
  badge.dataset.state = state;
  badge.textContent = AGENT_STATE[state] ?? state;
  badge.title = detail ?? "";
  stop.hidden = !BUSY.has(state);
}

/** Show the connection state in `pill`. */
export function showLink(pill, state) {
  pill.dataset.state = state;
  pill.textContent = LINK_STATE[state] ?? state;
}
