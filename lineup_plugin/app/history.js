// @ts-check
// The agent's history as this App follows it: the last seq seen (kept in localStorage per agent,
// like SSE's Last-Event-ID) with what was shown up to it, so a reloaded page draws the
// conversation at once and asks only for what it missed; which live messages are duplicates;
// the oldest seq shown, before which the user may ask for older pages (history.older) by
// scrolling up. (How an ended call reads on its card: cards/outcome.js.)

const AGENT_KEY = "lineup.agent";
const keyOf = (agentId) => `lineup.history.${agentId}`;
/** how many shown items a page keeps for the next load (the agent keeps more: a new device gets it all) */
export const KEPT_ITEMS = 500;

export class HistoryCursor {
  constructor() {
    /** @type {number | null} where the items of an older page go (see older()), or null */
    this.olderAt = null;
    /** where the items shown before a catch-up's newest page end (its older pages go there: mark()) */
    this.gapAt = 0;
    /** @type {number | null} the lowest seq shown since the page was loaded (older pages come before it) */
    this.oldest = null;
    this.agentId = localStorage.getItem(AGENT_KEY) || "lineup-agent";
    this.load();
  }

  load() {
    let saved = {};
    try {
      saved = JSON.parse(localStorage.getItem(keyOf(this.agentId)) ?? "{}") ?? {};
    } catch {
      saved = {}; // unreadable: start over (the agent sends everything it keeps)
    }
    this.historyId = typeof saved.id === "string" ? saved.id : null;
    this.items = Array.isArray(saved.items) ? saved.items : [];
    // without what was shown, a fresh page must be sent everything again
    this.seq = Number.isSafeInteger(saved.seq) && saved.seq >= 0 && this.items.length ? saved.seq : 0;
  }

  /** Keep one shown item (a history entry, a numbered live message, an answer given here) for the next load. */
  remember(item) {
    if (this.olderAt !== null) {
      if (this.olderAt < this.gapAt) this.gapAt++; // above what was shown before the catch-up
      this.items.splice(this.olderAt++, 0, item); // an older page: before the rest
    } else this.items.push(item);
    const over = this.items.length - KEPT_ITEMS;
    if (over > 0) {
      this.items.splice(0, over); // the oldest go (an older page's too)
      this.gapAt = Math.max(0, this.gapAt - over);
      if (this.olderAt !== null) this.olderAt = Math.max(0, this.olderAt - over);
    }
    this.dirty = true;
  }

  /**
   * A seq was shown (drawn again from what was kept, caught up or live): the oldest goes first in
   * the next history.older.
   * @param {unknown} seq
   */
  shown(seq) {
    if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 1) return;
    if (this.oldest === null || seq < this.oldest) this.oldest = seq;
  }

  /** A catch-up's newest page comes: the older pages of what was missed go between what is kept and it. */
  mark() {
    this.gapAt = this.items.length;
  }

  /** The agent welcomed us: its history is the one to follow (another agent: its own cursor). */
  follow(agentId) {
    if (!agentId || agentId === this.agentId) return;
    this.agentId = agentId;
    localStorage.setItem(AGENT_KEY, agentId);
    this.load();
  }

  /**
   * What device.hello says about the history: where to resume, and that the catch-up may come
   * newest page first (the older pages of what was missed follow the waiting cards, marked
   * `older`; a new device gets the newest page only and asks for the older ones: history.older).
   */
  hello() {
    const resume = this.historyId ? { last_seq: this.seq, history_id: this.historyId } : { last_seq: this.seq };
    return { ...resume, newest_first: true };
  }

  /**
   * Keep what `show()` remembers as items older than everything kept (the answer to a
   * history.older), or (`gap`) older than the catch-up's newest page only (a page marked `older`).
   * @param {() => void} show
   * @param {{gap?: boolean}} [where]
   */
  older(show, { gap = false } = {}) {
    this.olderAt = gap ? this.gapAt : 0;
    try {
      show();
    } finally {
      this.olderAt = null;
    }
  }

  /** Whether a message numbered `seq` (or not numbered) is new to this App. */
  fresh(seq) {
    return !Number.isSafeInteger(seq) || seq > this.seq;
  }

  /** A numbered message or entry was shown. */
  advance(seq) {
    if (Number.isSafeInteger(seq) && seq > this.seq) this.seq = seq;
    if (this.dirty) this.save();
  }

  /** The agent's history starts over for us (`reset`): forget our seq; remember its id. */
  restart(historyId, reset) {
    if (typeof historyId === "string" && historyId !== this.historyId) {
      this.historyId = historyId;
      this.save();
    }
    if (reset) {
      this.seq = 0;
      this.items = [];
      this.gapAt = 0;
      this.oldest = null;
      this.save();
    }
  }

  save() {
    this.dirty = false;
    for (;;) {
      try {
        localStorage.setItem(keyOf(this.agentId), JSON.stringify({ id: this.historyId, seq: this.seq, items: this.items }));
        return;
      } catch {
        if (!this.items.length) return; // storage refused even the cursor: the next load asks for everything
        this.items.splice(0, Math.ceil(this.items.length / 2)); // full: keep the newer half
      }
    }
  }
}
