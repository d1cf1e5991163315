// @ts-check
// The agent's conversations (its sessions: gateway chats, the CLI...): a tab per conversation,
// the feed filtered to the one chosen, a mark on the others when something new arrives there.

import { h } from "./dom.js";
import { newId } from "./envelope.js";

export const DEFAULT_CONVERSATION = "default";
const CHOSEN_KEY = "lineup.conversation";
/** conversations the App starts get ids with this prefix (an agent may map them to its own chats) */
const NEW_PREFIX = "app-";

export class Conversations {
  /** `nav` holds the tabs, `list` is the feed whose children carry data-conversation. */
  constructor(nav, list, onSwitch) {
    this.nav = nav;
    this.list = list;
    this.onSwitch = onSwitch;
    this.tabs = h("div", { class: "conv-tabs", role: "group", "aria-label": "Conversations" });
    this.add = h("button", { type: "button", class: "conv-new", title: "Start a new conversation" }, "+ New");
    this.add.addEventListener("click", () => this.select(this.create(`${NEW_PREFIX}${newId()}`)));
    this.nav.append(this.tabs, this.add);
    this.known = new Map();
    this.current = localStorage.getItem(CHOSEN_KEY) || DEFAULT_CONVERSATION;
    this.create(this.current);
  }

  /** Make sure conversation `id` has a tab; `title` names it (else it is named after its first message). */
  create(id, title) {
    let known = this.known.get(id);
    if (!known) {
      const button = h("button", { type: "button", class: "conv-tab", "data-conversation": id });
      button.addEventListener("click", () => this.select(id));
      known = { id, title: null, guess: null, button, unread: 0 };
      this.known.set(id, known);
      this.tabs.append(button);
    }
    if (title) known.title = title;
    this.paint(known);
    return id;
  }

  /** The conversation's title: given, or its first user message, or a name made from its id. */
  titleOf(id) {
    const known = this.known.get(id);
    if (known?.title) return known.title;
    if (known?.guess) return known.guess;
    if (id === DEFAULT_CONVERSATION) return "Main";
    return id.startsWith(NEW_PREFIX) ? "New conversation" : `Conversation ${id.slice(-6)}`;
  }

  /** The user's first message names an untitled conversation the App started. */
  guess(id, text) {
    const known = this.known.get(id);
    if (known && id.startsWith(NEW_PREFIX) && !known.title && !known.guess) {
      known.guess = text.length > 40 ? `${text.slice(0, 39)}…` : text;
      this.paint(known);
    }
  }

  paint(known) {
    const chosen = known.id === this.current;
    known.button.textContent = this.titleOf(known.id);
    known.button.setAttribute("aria-pressed", String(chosen));
    known.button.dataset.unread = known.unread && !chosen ? String(known.unread) : "";
    if (known.unread && !chosen) known.button.append(h("span", { class: "visually-hidden" }, ` (${known.unread} new)`));
    for (const el of this.list.querySelectorAll(`.card[data-conversation="${CSS.escape(known.id)}"] .card-conversation`)) {
      el.textContent = this.titleOf(known.id);
    }
  }

  /** Show conversation `id` (its messages and cards), hide the others. */
  select(id) {
    this.create(id);
    this.current = id;
    localStorage.setItem(CHOSEN_KEY, id);
    const known = this.known.get(id);
    known.unread = 0;
    for (const other of this.known.values()) this.paint(other);
    for (const el of this.list.children) el.hidden = (el.dataset.conversation ?? DEFAULT_CONVERSATION) !== id;
    this.onSwitch?.(id);
  }

  /** A feed element of conversation `id` is about to be shown: tag it, label a card, count it if elsewhere. */
  place(el, id) {
    this.create(id);
    el.dataset.conversation = id;
    if (el.classList.contains("card")) {
      const label = h("span", { class: "card-conversation", title: "Conversation" }, this.titleOf(id));
      el.querySelector(".card-head")?.append(label);
    }
    el.hidden = id !== this.current;
    if (el.hidden) {
      const known = this.known.get(id);
      known.unread += 1;
      this.paint(known);
    }
  }

  /** Forget every conversation but the chosen one (the agent's history starts over). */
  clear() {
    for (const known of this.known.values()) known.button.remove();
    this.known.clear();
    this.create(this.current);
  }
}
