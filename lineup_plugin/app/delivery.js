// @ts-check
// The user's own messages until the agent has taken them: each is marked "Sending…" when typed,
// unmarked when its history entry comes back (the agent kept it: every device shows it), and
// marked "Not sent" with a Retry button when the agent refused it or its files could not be sent.
// A text waiting for the agent is also kept in localStorage, so a reload (or a closed tab) does
// not lose it: the next load draws it again and sends the same envelope (the agent drops an
// envelope id it has seen; its history then says it arrived).

/** @typedef {import("./chat.js").Feed} Feed */
/** @typedef {import("./transport.js").Transport} Transport */

const OUTBOX_KEY = "lineup.outbox";
/** how many waiting texts are kept for the next load */
const OUTBOX_KEPT = 100;

/**
 * @typedef {object} Outgoing
 * @property {HTMLElement} bubble
 * @property {() => Promise<string> | string} send sends it (again); the envelope's id
 */

/**
 * @typedef {object} Kept a text waiting for the agent, as localStorage keeps it
 * @property {string} id the envelope's id
 * @property {string} envelope the envelope (JSON)
 * @property {string} text
 * @property {string} conversation
 * @property {string} at when it was typed (ISO)
 */

/** @returns {Kept[]} */
function loadKept() {
  try {
    const kept = JSON.parse(localStorage.getItem(OUTBOX_KEY) ?? "[]");
    return Array.isArray(kept) ? kept.filter((k) => k && typeof k.id === "string" && typeof k.envelope === "string") : [];
  } catch {
    return [];
  }
}

export class Deliveries {
  /**
   * @param {Feed} feed
   * @param {Transport} transport
   */
  constructor(feed, transport) {
    this.feed = feed;
    this.transport = transport;
    /** @type {Map<string, Outgoing>} envelope id → message not yet taken */
    this.waiting = new Map();
    /** ids of every text typed here (its history entry is not drawn again) */
    this.mine = new Set();
    /** @type {Kept[]} */
    this.kept = loadKept();
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
   * Send `text` typed in `conversation`, drawn as `bubble`; kept until the agent has it.
   * @param {HTMLElement} bubble
   * @param {string} text
   * @param {string} conversation
   */
  text(bubble, text, conversation) {
    return this.start(bubble, () => {
      const envelope = this.transport.envelope("text", { text }, conversation);
      const json = JSON.stringify(envelope);
      this.keep({ id: envelope.id, envelope: json, text, conversation, at: envelope.timestamp });
      this.transport.post(json);
      return envelope.id;
    });
  }

  /**
   * Draw again (with `draw`) and send again the texts a previous load left waiting.
   * @param {(kept: Kept) => HTMLElement} draw
   */
  restore(draw) {
    for (const kept of this.kept) {
      const bubble = draw(kept);
      this.feed.mark(bubble, "pending");
      this.mine.add(kept.id);
      this.waiting.set(kept.id, { bubble, send: () => this.resend(kept) });
      this.transport.post(kept.envelope);
    }
  }

  /**
   * A new envelope for a kept text the agent refused (Retry).
   * @param {Kept} kept
   */
  resend(kept) {
    const envelope = this.transport.envelope("text", { text: kept.text }, kept.conversation);
    const json = JSON.stringify(envelope);
    this.keep({ ...kept, id: envelope.id, envelope: json });
    this.transport.post(json);
    return envelope.id;
  }

  /** @param {Kept} kept */
  keep(kept) {
    this.kept.push(kept);
    if (this.kept.length > OUTBOX_KEPT) this.kept.splice(0, this.kept.length - OUTBOX_KEPT);
    this.save();
  }

  /** @param {string} id */
  forget(id) {
    const before = this.kept.length;
    this.kept = this.kept.filter((k) => k.id !== id);
    if (this.kept.length !== before) this.save();
  }

  save() {
    try {
      localStorage.setItem(OUTBOX_KEY, JSON.stringify(this.kept));
    } catch {
      // storage full: the texts are still sent, a reload before they arrive would not send them again
    }
  }

  /**
   * The history entry of text `ref` came back: true if it was typed here (and is drawn already).
   * @param {unknown} ref
   */
  taken(ref) {
    if (typeof ref !== "string" || !this.mine.has(ref)) return false;
    this.forget(ref);
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
    this.forget(/** @type {string} */ (ref));
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
