// @ts-check
// Which path the App uses to reach the agent: direct (the WebSocket of :9527) when it can, the
// relay (WuKongIM, relay.js) when it is paired and :9527 cannot be reached, and direct again as
// soon as :9527 answers (it is retried in the background). Each path says device.hello with the
// cards still open, so the agent re-sends live ones and closes ended ones: nothing is lost or
// shown twice across a switch (the deck keeps one card per call id).
//
// The transport is also who the App talks to: the agent's id (learnt from what it sends) and
// the envelopes (makeEnvelope) are made here, for the conversation each send names.

import { deviceName } from "./cards/outcome.js";
import { Connection } from "./connection.js";
import { APP_VERSION, DEFAULT_AGENT, PROTOCOL_VERSION, deviceId, makeEnvelope } from "./envelope.js";
import { StateMachine } from "./machine.js";
import { forgetPairing, loadPairing, pairOverDirect } from "./pairing.js";
import { RelayConnection } from "./relay.js";

const DIRECT_RETRY_MS = 5_000;
/** the conversation of messages that belong to none (device.hello) */
const NO_CONVERSATION = "default";

/** @typedef {import("./connection.js").LinkState} LinkState */
/** @typedef {import("./connection.js").Received} Received */

/**
 * @typedef {object} TransportCallbacks
 * @property {(message: Received) => void} onMessage every received envelope, by either path
 * @property {(state: LinkState) => void} onState the state of the path in use
 * @property {() => void} onAuthFailed the agent refused the token
 * @property {(message: string) => void} onUnreachable the agent cannot be reached and there is no pairing
 * @property {(message: string) => void} onProblem
 * @property {(path: "direct" | "relay") => void} onPath
 * @property {(message: string) => void} onRefused the relay will not take this pairing
 * @property {(pairing: object) => void} onPaired
 * @property {() => string[]} openCalls call ids of the cards still waiting for the user (sent in device.hello)
 * @property {() => object} resume the history fields of device.hello ({last_seq, history_id})
 */

/**
 * started: the user connected (one path or the other is in use or being retried); stopped: the
 * user disconnected, or the agent refused the token.
 * @typedef {"stopped" | "started"} TransportState
 */

/** Connect, disconnect and send, by the path that works. */
export class Transport {
  /** @param {TransportCallbacks} callbacks */
  constructor(callbacks) {
    this.cb = callbacks;
    /** @type {"direct" | "relay"} */
    this.path = "direct";
    this.host = "";
    this.token = "";
    /** the agent's id, as it says in device.welcome and as the sender of what it sends */
    this.agentId = DEFAULT_AGENT;
    /** @type {StateMachine<TransportState>} */
    this.machine = new StateMachine("transport", { stopped: ["started"], started: ["stopped"] }, "stopped");
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.retry = undefined;
    this.pairTried = false;
    const common = {
      onMessage: (/** @type {Received} */ m) => this.received(m),
      onProblem: (/** @type {string} */ m) => this.cb.onProblem(m),
      hello: (/** @type {Record<string, unknown>} */ fields) => this.hello(fields),
    };
    this.direct = new Connection({
      ...common,
      onState: (state) => this.directState(state),
      onAuthFailed: () => {
        this.disconnect();
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

  get stopped() {
    return this.machine.state === "stopped";
  }

  /**
   * Connect directly to `host` with `token` (falling back to the relay when paired).
   * @param {string} host
   * @param {string} token
   */
  connect(host, token) {
    Object.assign(this, { host, token, pairTried: false });
    this.machine.go("started");
    this.direct.connect(host, token);
  }

  /** Connect by relay only (the App opened away from the agent, e.g. exported to an HTTPS host). */
  connectRelay() {
    Object.assign(this, { host: "", token: "" });
    this.machine.go("started");
    return this.useRelay();
  }

  /** Close both paths for good. */
  disconnect() {
    this.machine.go("stopped");
    clearTimeout(this.retry);
    this.relay.disconnect();
    this.direct.disconnect();
    this.cb.onState("offline");
  }

  /** Try again at once instead of waiting (the page became visible again, the user asked). */
  retryNow() {
    if (this.stopped) return;
    if (this.path === "direct") this.direct.retryNow();
    else if (this.direct.state === "stopped" && this.host) {
      clearTimeout(this.retry);
      this.direct.connect(this.host, this.token); // home again? direct is preferred
    }
  }

  /**
   * Send `payload` as a `kind` envelope in conversation `conversationId`, by the path in use (queued
   * until the agent welcomes us); returns the envelope's id.
   * @param {string} kind
   * @param {object} payload
   * @param {string} conversationId
   */
  send(kind, payload, conversationId) {
    const envelope = this.envelope(kind, payload, conversationId);
    this.post(JSON.stringify(envelope));
    return envelope.id;
  }

  /**
   * A `kind` envelope to the agent in conversation `conversationId` (sent with post()).
   * @param {string} kind
   * @param {object} payload
   * @param {string} conversationId
   */
  envelope(kind, payload, conversationId) {
    return makeEnvelope(kind, payload, { agentId: this.agentId, conversationId });
  }

  /**
   * Send an envelope (JSON) by the path in use, queued until the agent welcomes us.
   * @param {string} text
   */
  post(text) {
    (this.path === "relay" ? this.relay : this.direct).send(text);
  }

  /**
   * The device.hello envelope: this device, `fields` of the path (token, name), the open cards
   * and where the history resumes.
   * @param {Record<string, unknown>} fields
   */
  hello(fields) {
    const hello = {
      device_id: deviceId(),
      app_version: APP_VERSION,
      protocol_version: PROTOCOL_VERSION,
      ...fields,
      name: deviceName(), // what other devices' cards say an answer was given on ("Approved on Pixel 7 (Chrome)")
      open_calls: this.cb.openCalls(),
      ...this.cb.resume(),
    };
    return makeEnvelope("device.hello", hello, { agentId: this.agentId, conversationId: NO_CONVERSATION });
  }

  /** @param {Received} message */
  received(message) {
    const { kind, payload, envelope } = message;
    if (kind === "device.welcome" && typeof payload.agent?.id === "string" && payload.agent.id) {
      this.agentId = payload.agent.id;
    } else if (envelope.sender?.kind === "agent" && typeof envelope.sender.id === "string" && envelope.sender.id) {
      this.agentId = envelope.sender.id;
    }
    this.cb.onMessage(message);
  }

  /** @param {"direct" | "relay"} path */
  setPath(path) {
    if (path === this.path) return;
    const [from, to] = path === "relay" ? [this.direct, this.relay] : [this.relay, this.direct];
    to.outbox.take(from.outbox); // what the user did meanwhile goes by the new path
    this.path = path;
    this.cb.onPath(path);
  }

  useRelay() {
    const pairing = loadPairing();
    if (!pairing || this.stopped) return false;
    if (this.path !== "relay" || this.relay.state === "stopped") {
      this.setPath("relay");
      this.relay.connect(pairing);
    }
    return true;
  }

  /** @param {LinkState} state */
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

  /** @param {string} message */
  directUnreachable(message) {
    if (!this.useRelay()) {
      this.cb.onUnreachable(message);
      return;
    }
    clearTimeout(this.retry);
    this.retry = setTimeout(() => !this.stopped && this.direct.connect(this.host, this.token), DIRECT_RETRY_MS);
  }

  /** @param {string} message */
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
