// @ts-check
// The agent's conversations (its sessions: gateway chats, the CLI...): a tab per conversation,
// the feed filtered to the one chosen, a count on the others of what arrived there unread (kept
// across reloads: the newest seq read in each conversation is kept in localStorage), and the
// current one renamed or closed from its options.

import { dateTime, h, uid } from "./dom.js";
import { newId } from "./envelope.js";

export const DEFAULT_CONVERSATION = "default";
const CHOSEN_KEY = "lineup.conversation";
const READ_KEY = "lineup.read";
/** how many conversations' read marks are kept */
const READ_KEPT = 200;
/** conversations the App starts get ids with this prefix (an agent may map them to its own chats) */
const NEW_PREFIX = "app-";
/** the longest title (the agent cuts longer ones too) */
export const MAX_TITLE = 200;

/**
 * @typedef {object} Known
 * @property {string} id
 * @property {string | null} title given by the agent or the user
 * @property {string | null} guess the first message typed here, for a conversation without a title
 * @property {number} guessSeq the history seq of that message (Infinity: typed here, not numbered yet)
 * @property {number} since when the earliest entry known of it happened (ms since the epoch; 0: none known)
 * @property {HTMLButtonElement} button its tab
 * @property {number} unread
 * @property {number} latest the newest seq shown in it
 * @property {boolean} closed
 * @property {number} closedAt the newest seq when it was closed (what comes after opens it again)
 */

/**
 * @typedef {object} Placed how a feed element came
 * @property {number} [seq] its history seq, if numbered
 * @property {boolean} [counts] whether it counts as unread when it is not read yet (not the user's own)
 */

/**
 * @typedef {object} ConversationActions what the user asks of a conversation (sent to the agent)
 * @property {(id: string, title: string) => void} rename
 * @property {(id: string) => void} close
 */

/** @returns {Record<string, number>} */
function loadRead() {
  try {
    const read = JSON.parse(localStorage.getItem(READ_KEY) ?? "{}");
    return read && typeof read === "object" && !Array.isArray(read) ? read : {};
  } catch {
    return {};
  }
}

export class Conversations {
  /**
   * @param {HTMLElement} nav holds the tabs and the buttons
   * @param {HTMLElement} list the feed, whose children carry data-conversation
   * @param {{onSwitch?: (id: string) => void, actions?: ConversationActions}} [options]
   */
  constructor(nav, list, { onSwitch, actions } = {}) {
    this.nav = nav;
    this.list = list;
    this.onSwitch = onSwitch;
    this.actions = actions;
    this.tabs = h("div", { class: "conv-tabs", role: "group", "aria-label": "Conversations" });
    this.add = h("button", { type: "button", class: "conv-new", title: "Start a new conversation" }, "+ New");
    this.add.addEventListener("click", () => this.select(this.create(`${NEW_PREFIX}${newId()}`)));
    this.more = h(
      "button",
      { type: "button", class: "conv-more", "aria-label": "Rename or close this conversation", title: "Rename or close" },
      "⋯",
    );
    this.more.addEventListener("click", () => this.openOptions());
    this.dialog = this.optionsDialog();
    this.nav.append(this.tabs, this.add, this.more, this.dialog);
    /** @type {Map<string, Known>} */
    this.known = new Map();
    this.read = loadRead();
    this.current = localStorage.getItem(CHOSEN_KEY) || DEFAULT_CONVERSATION;
    this.create(this.current);
  }

  /**
   * Make sure conversation `id` has a tab; `title` names it (else it is named after its first message).
   * @param {string} id
   * @param {string | null} [title]
   */
  create(id, title) {
    let known = this.known.get(id);
    if (!known) {
      const button = /** @type {HTMLButtonElement} */ (h("button", { type: "button", class: "conv-tab", "data-conversation": id }));
      button.addEventListener("click", () => this.select(id));
      known = { id, title: null, guess: null, guessSeq: Infinity, since: 0, button, unread: 0, latest: 0, closed: false, closedAt: 0 };
      this.known.set(id, known);
      this.tabs.append(button);
    }
    if (title) known.title = title.slice(0, MAX_TITLE);
    this.paint(known);
    return id;
  }

  /**
   * The conversation's title, for people: given (by the agent or the user), or its first user
   * message, or when it began ("New conversation" for one the App started and nothing typed yet).
   * Never its id: an agent's session ids mean nothing to the user.
   * @param {string} id
   */
  titleOf(id) {
    const known = this.known.get(id);
    if (known?.title) return known.title;
    if (known?.guess) return known.guess;
    if (id === DEFAULT_CONVERSATION) return "Main";
    if (id.startsWith(NEW_PREFIX)) return "New conversation";
    return known?.since ? `Conversation of ${dateTime(new Date(known.since))}` : "Conversation";
  }

  /**
   * The user's first message in an untitled conversation names it: the one with the lowest history
   * `seq` seen (older pages come later), or the one just typed while none is known.
   * @param {string} id
   * @param {string} text
   * @param {number} [seq]
   */
  guess(id, text, seq = Infinity) {
    const known = this.known.get(id);
    if (!known || id === DEFAULT_CONVERSATION || known.title || !text.trim()) return;
    if (known.guess !== null && seq >= known.guessSeq) return;
    known.guess = text.length > 40 ? `${text.slice(0, 39)}…` : text;
    known.guessSeq = seq;
    this.paint(known);
  }

  /**
   * Something of conversation `id` happened `at` (an ISO timestamp): an untitled one is named after
   * the earliest such time until a message names it.
   * @param {string} id
   * @param {unknown} at
   */
  dated(id, at) {
    const known = this.known.get(id);
    const when = typeof at === "string" ? Date.parse(at) : NaN;
    if (!known || Number.isNaN(when) || (known.since && known.since <= when)) return;
    known.since = when;
    if (!known.title && !known.guess) this.paint(known);
  }

  /** @param {Known} known */
  paint(known) {
    const chosen = known.id === this.current;
    known.button.hidden = known.closed;
    // the name in a span of its own: a long one is cut with an ellipsis (its whole text on hover and
    // in the ⋯ dialog), so that one long title does not push "+ New" off a phone's screen
    const title = this.titleOf(known.id);
    known.button.replaceChildren(h("span", { class: "conv-name" }, title));
    known.button.title = title;
    known.button.setAttribute("aria-pressed", String(chosen));
    known.button.dataset.unread = known.unread && !chosen ? String(known.unread) : "";
    if (known.unread && !chosen) {
      known.button.append(h("span", { class: "conv-unread" }, h("span", { class: "visually-hidden" }, " ("), `${known.unread}`, h("span", { class: "visually-hidden" }, " new)")));
    }
    for (const el of this.list.querySelectorAll(`.card[data-conversation="${CSS.escape(known.id)}"] .card-conversation`)) {
      el.textContent = this.titleOf(known.id);
    }
  }

  /**
   * Show conversation `id` (its messages and cards), hide the others; what is in it counts as read.
   * @param {string} id
   */
  select(id) {
    this.create(id);
    this.current = id;
    localStorage.setItem(CHOSEN_KEY, id);
    const known = /** @type {Known} */ (this.known.get(id));
    known.closed = false;
    known.unread = 0;
    this.markRead(known);
    for (const other of this.known.values()) this.paint(other);
    for (const el of this.list.children) {
      if (el instanceof HTMLElement) el.hidden = (el.dataset.conversation ?? DEFAULT_CONVERSATION) !== id;
    }
    this.more.hidden = false;
    this.onSwitch?.(id);
  }

  /** @param {Known} known */
  markRead(known) {
    if (!known.latest || (this.read[known.id] ?? 0) >= known.latest) return;
    delete this.read[known.id]; // re-inserted last: the oldest marks go first
    this.read[known.id] = known.latest;
    const ids = Object.keys(this.read);
    for (const old of ids.slice(0, Math.max(0, ids.length - READ_KEPT))) delete this.read[old];
    try {
      localStorage.setItem(READ_KEY, JSON.stringify(this.read));
    } catch {
      // storage full: the counts after a reload may be too high, nothing else
    }
  }

  /**
   * A feed element of conversation `id` is about to be shown: tag it, label a card, count it if
   * it is elsewhere and not read yet.
   * @param {HTMLElement} el
   * @param {string} id
   * @param {Placed} [placed]
   */
  place(el, id, { seq, counts = true } = {}) {
    this.create(id);
    const known = /** @type {Known} */ (this.known.get(id));
    el.dataset.conversation = id;
    if (el.classList.contains("card")) {
      const label = h("span", { class: "card-conversation", title: "Conversation" }, this.titleOf(id));
      el.querySelector(".card-head")?.append(label);
    }
    const numbered = typeof seq === "number" && Number.isSafeInteger(seq);
    if (known.closed && counts && (!numbered || seq > known.closedAt)) {
      known.closed = false; // something new there: it opens again (as the agent does)
      this.paint(known);
    }
    if (numbered) known.latest = Math.max(known.latest, seq);
    el.hidden = id !== this.current;
    if (!el.hidden) this.markRead(known);
    else if (counts && (!numbered || seq > (this.read[id] ?? 0))) {
      known.unread += 1;
      this.paint(known);
    }
  }

  /**
   * The agent says conversation `id` is called `title`, or was closed or opened again (by any
   * device), as of its entry `seq`.
   * @param {string} id
   * @param {{title?: string | null, closed?: boolean | null, seq?: number}} change
   */
  update(id, { title, closed, seq }) {
    this.create(id, title);
    if (closed === true) this.hide(id, seq);
    else if (closed === false) {
      const known = /** @type {Known} */ (this.known.get(id));
      known.closed = false;
      this.paint(known);
    }
  }

  /**
   * Close conversation `id` here (as of entry `seq`): its tab goes; Main is shown if it was the current one.
   * @param {string} id
   * @param {number} [seq]
   */
  hide(id, seq) {
    const known = this.known.get(id);
    if (!known || id === DEFAULT_CONVERSATION) return;
    known.closed = true;
    known.closedAt = Math.max(known.closedAt, seq ?? known.latest);
    known.unread = 0;
    this.paint(known);
    if (this.current === id) this.select(DEFAULT_CONVERSATION);
  }

  /** The options of the current conversation: its name, and Close (not for Main). */
  optionsDialog() {
    const titleId = uid("conv-title");
    const fieldId = uid("conv-name");
    this.nameField = /** @type {HTMLInputElement} */ (h("input", { id: fieldId, name: "title", maxlength: MAX_TITLE, autocomplete: "off", required: true }));
    this.closeButton = h("button", { type: "button", class: "danger" }, "Close conversation");
    const dialog = /** @type {HTMLDialogElement} */ (
      h(
        "dialog",
        { class: "conv-dialog", "aria-labelledby": titleId },
        h(
          "form",
          { method: "dialog", class: "form" },
          h("h2", { id: titleId }, "This conversation"),
          h("div", { class: "field" }, h("label", { for: fieldId }, "Name"), this.nameField),
          h(
            "div",
            { class: "actions" },
            this.closeButton,
            h("button", { type: "button", onclick: () => dialog.close() }, "Cancel"),
            h("button", { type: "submit", class: "primary", value: "rename" }, "Rename"),
          ),
        ),
      )
    );
    dialog.addEventListener("close", () => {
      const title = this.nameField.value.trim();
      if (dialog.returnValue === "rename" && title && title !== this.titleOf(this.current)) {
        this.create(this.current, title);
        this.actions?.rename(this.current, title);
      }
    });
    this.closeButton.addEventListener("click", () => {
      const id = this.current;
      dialog.close();
      this.hide(id);
      this.actions?.close(id);
    });
    return dialog;
  }

  openOptions() {
    this.nameField.value = this.titleOf(this.current);
    this.closeButton.hidden = this.current === DEFAULT_CONVERSATION;
    this.dialog.returnValue = "";
    this.dialog.showModal();
    this.nameField.select();
  }

  /** Forget every conversation but the chosen one, and what was read (the agent's history starts over: its seqs too). */
  clear() {
    for (const known of this.known.values()) known.button.remove();
    this.known.clear();
    this.read = {};
    localStorage.removeItem(READ_KEY);
    this.create(this.current);
  }
}
