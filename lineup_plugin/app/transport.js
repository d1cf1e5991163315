// Which path the App uses to reach the agent: direct (the WebSocket of :9527) when it can, the
// relay (WuKongIM, relay.js) when it is paired and :9527 cannot be reached, and direct again as
// soon as :9527 answers (it is retried in the background). Each path says device.hello with the
// cards still open, so the agent re-sends live ones and closes ended ones: nothing is lost or
// shown twice across a switch (the deck keeps one card per call id).

import { Connection } from "./connection.js";
import { forgetPairing, loadPairing, pairOverDirect } from "./pairing.js";
import { RelayConnection } from "./relay.js";

const DIRECT_RETRY_MS = 5_000;

/**
 * Same interface as Connection (connect, disconnect, send) plus the relay. Callbacks: those of
 * Connection, and onPath("direct" | "relay"), onRefused(message) (the relay will not take this
 * pairing), onPaired(pairing).
 */
export class Transport {
  constructor(callbacks) {
    this.cb = callbacks;
    this.path = "direct";
    this.stopped = true;
    this.retry = null;
    this.pairTried = false;
    const common = {
      onMessage: (m) => this.cb.onMessage(m),
      onProblem: (m) => this.cb.onProblem(m),
      openCalls: () => this.cb.openCalls(),
      resume: () => this.cb.resume?.(),
    };
    this.direct = new Connection({
      ...common,
      onState: (state) => this.directState(state),
      onAuthFailed: () => {
        this.relay.disconnect();
        this.cb.onAuthFailed();
      },
      onUnreachable: (message) => this.directUnreachable(message),
    });
    this.relay = new RelayConnection({
      ...common,
      onState: (state) => this.path === "relay" && this.cb.onState(state),
      onRefused: (message) => this.refused(message),
    });
  }

  /** Connect directly to `host` with `token` (falling back to the relay when paired). */
  connect(host, token) {
    Object.assign(this, { host, token, stopped: false, pairTried: false });
    this.direct.connect(host, token);
  }

  /** Connect by relay only (the App opened away from the agent, e.g. exported to an HTTPS host). */
  connectRelay() {
    Object.assign(this, { host: "", token: "", stopped: false });
    return this.useRelay();
  }

  /** Close both paths for good. */
  disconnect() {
    this.stopped = true;
    clearTimeout(this.retry);
    this.relay.disconnect();
    this.direct.disconnect();
  }

  /** Send by the path in use; returns the envelope's id. */
  send(kind, payload) {
    return (this.path === "relay" ? this.relay : this.direct).send(kind, payload);
  }

  setPath(path) {
    if (path === this.path) return;
    const [from, to] = path === "relay" ? [this.direct, this.relay] : [this.relay, this.direct];
    to.outbox.push(...from.outbox.splice(0)); // what the user did meanwhile goes by the new path
    this.path = path;
    this.cb.onPath(path);
  }

  useRelay() {
    const pairing = loadPairing();
    if (!pairing || this.stopped) return false;
    if (this.path !== "relay" || !this.relay.active) {
      this.setPath("relay");
      this.relay.connect(pairing);
    }
    return true;
  }

  directState(state) {
    if (state === "connected") {
      clearTimeout(this.retry);
      this.setPath("direct");
      this.relay.disconnect();
      this.cb.onState("connected");
      this.pair();
    } else if (state === "reconnecting" && this.useRelay()) {
      // the direct connection keeps retrying in the background
    } else if (this.path === "direct") {
      this.cb.onState(state);
    }
  }

  directUnreachable(message) {
    if (!this.useRelay()) {
      this.cb.onUnreachable(message);
      return;
    }
    clearTimeout(this.retry);
    this.retry = setTimeout(() => !this.stopped && this.direct.connect(this.host, this.token), DIRECT_RETRY_MS);
  }

  refused(message) {
    forgetPairing();
    this.setPath("direct");
    this.cb.onRefused(message);
  }

  /** Once directly connected: pair for the relay if not paired yet (once per connect). */
  pair() {
    if (this.pairTried || loadPairing()) return;
    this.pairTried = true;
    pairOverDirect(this.host, this.token)
      .then((pairing) => pairing && this.cb.onPaired(pairing))
      .catch((error) => this.cb.onProblem(`Could not pair for use away from home: ${error.message}`));
  }
}
