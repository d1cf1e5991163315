// The feed (chat messages and cards, in order), the agent's status badge and the connection pill.

import { h } from "./dom.js";

const AGENT_STATE = {
  idle: "Idle",
  thinking: "Thinking…",
  waiting_input: "Waiting for you",
  running: "Working…",
  interrupted: "Interrupted",
  failed: "Failed",
};
const BUSY = new Set(["thinking", "waiting_input", "running"]);
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
  }

  /** Append an element, keeping the view at the bottom if the user was there. */
  add(node) {
    const { scrollHeight, scrollTop, clientHeight } = this.scroller;
    const atBottom = scrollHeight - scrollTop - clientHeight < 80;
    this.onAdd?.(node); // e.g. tag it with its conversation
    this.list.append(node);
    if (atBottom) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /** A chat message from "user" or "agent", or a "system" notice. */
  message(from, text) {
    const node = h("div", { class: `msg msg-${from}` }, h("p", {}, text));
    this.add(node);
    return node;
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
