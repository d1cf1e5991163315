// @ts-check
// The user's own messages until the agent has taken them: each is marked "Sending…" when typed,
// unmarked when its history entry comes back (the agent kept it: every device shows it), and
// marked "Not sent" with a Retry button when the agent refused it or its files could not be sent.

/** @typedef {import("./chat.js").Feed} Feed */

/**
 * @typedef {object} Outgoing
 * @property {HTMLElement} bubble
 * @property {() => Promise<string> | string} send sends it (again); the envelope's id
 */

export class Deliveries {
  /** @param {Feed} feed */
  constructor(feed) {
    this.feed = feed;
    /** @type {Map<string, Outgoing>} envelope id → message not yet taken */
    this.waiting = new Map();
    /** ids of every text typed here (its history entry is not drawn again) */
    this.mine = new Set();
  }

  /**
   * Send a message drawn as `bubble` with `send` and follow it until the agent takes it.
   * @param {HTMLElement} bubble
   * @param {() => Promise<string> | string} send
   */
  async start(bubble, send) {
    this.feed.mark(bubble, "pending");
    let id;
    try {
      id = await send();
    } catch (error) {
      this.fail({ bubble, send }, error.message);
      return;
    }
    this.mine.add(id);
    this.waiting.set(id, { bubble, send });
  }

  /**
   * The history entry of text `ref` came back: true if it was typed here (and is drawn already).
   * @param {unknown} ref
   */
  taken(ref) {
    if (typeof ref !== "string" || !this.mine.has(ref)) return false;
    const outgoing = this.waiting.get(ref);
    if (outgoing) {
      this.waiting.delete(ref);
      this.feed.mark(outgoing.bubble, "sent");
    }
    return true;
  }

  /**
   * The agent refused envelope `ref` saying `why`: true if it was a message typed here.
   * @param {unknown} ref
   * @param {string} why
   */
  refused(ref, why) {
    const outgoing = typeof ref === "string" ? this.waiting.get(ref) : undefined;
    if (!outgoing) return false;
    this.waiting.delete(/** @type {string} */ (ref));
    this.fail(outgoing, why);
    return true;
  }

  /**
   * @param {Outgoing} outgoing
   * @param {string} why
   */
  fail(outgoing, why) {
    this.feed.mark(outgoing.bubble, "failed", { why, retry: () => this.start(outgoing.bubble, outgoing.send) });
  }
}
