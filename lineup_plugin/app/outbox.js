// @ts-check
// What one path to the agent (direct, relay) sends while it is not welcomed: queued in order and
// sent on the next welcome, for the same agent only.

/** The envelopes (JSON) a path holds until the agent welcomes it again. */
export class Outbox {
  constructor() {
    /** @type {string[]} */
    this.queued = [];
    /** which agent (and credential) they are for; "" until the path first connects */
    this.peer = "";
  }

  /**
   * The path now connects to `peer`: what was queued for another agent is dropped, never sent to
   * this one (a typed message could be private); a reconnect to the same one keeps it.
   * @param {string} peer
   */
  to(peer) {
    if (this.peer && peer !== this.peer) this.queued = [];
    this.peer = peer;
  }

  /**
   * Send `text` now by `post` when the path is `ready`, else keep it for the next welcome.
   * @param {string} text
   * @param {boolean} ready
   * @param {(text: string) => void} post
   */
  send(text, ready, post) {
    if (ready) post(text);
    else this.queued.push(text);
  }

  /**
   * The agent welcomed the path: what waited goes out by `post`, in order.
   * @param {(text: string) => void} post
   */
  flush(post) {
    for (const text of this.queued.splice(0)) post(text);
  }

  /**
   * The App switched paths: what waited on `other` goes by this one.
   * @param {Outbox} other
   */
  take(other) {
    this.queued.push(...other.queued.splice(0));
  }
}
