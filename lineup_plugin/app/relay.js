// @ts-check
// The App's connection through WuKongIM (the official JS SDK, bundled in vendor/relay.js): logs in
// as the App user of its pairing, says device.hello to the agent (the agent then re-sends every
// live card and closes the ones that ended meanwhile: that is how cards sent while this device
// was offline reach it) and exchanges LineUp envelopes sealed end to end (e2e.js).

import { readEnvelope } from "./envelope.js";
import { StateMachine } from "./machine.js";
import { Outbox } from "./outbox.js";
import { Sealer, relayLibrary } from "./e2e.js";

const DEFAULT_CONTENT_TYPE = 9527;
// WuKongIM v2 answers a wrong token with silence and a close: after this many closes in a row
// without a login, say what it may mean (the SDK keeps retrying).
const FAILED_LOGINS_TOLD = 3;

let contentType = DEFAULT_CONTENT_TYPE;

/**
 * LineUp custom content: {"type": 9527, "e2e": {...}} (or the agent's {"refused": {...}} in clear),
 * a subclass of the SDK's MessageContent (its bundle types it as a plain function).
 * @param {unknown} MessageContent
 */
function lineUpContent(MessageContent) {
  const Content = /** @type {new () => any} */ (MessageContent); // the SDK's class, untyped
  return class LineUpContent extends Content {
    constructor(data = {}) {
      super();
      this.data = data;
    }
    get contentType() {
      return contentType;
    }
    encodeJSON() {
      return { ...this.data };
    }
    /** @param {any} content */
    decodeJSON(content) {
      this.data = content;
    }
  };
}

/** @type {Promise<any> | null} the relay library (vendor/relay.js, untyped) with LineUpContent, once loaded */
let loaded = null;

/** The relay library, fetched the first time the relay is used (a direct-only App never loads it). */
function loadRelay() {
  loaded ??= relayLibrary().then(
    (library) => ({ ...library, LineUpContent: lineUpContent(library.MessageContent) }),
    (error) => {
      loaded = null; // offline: tried again on the next connect
      throw error;
    },
  );
  return loaded;
}

/**
 * The states of the relay path:
 * - stopped: not logged in (the direct path is in use, the user disconnected, or refused);
 * - connecting: logging in for the first time since connect(), then saying device.hello;
 * - ready: the agent welcomed us; what is sent goes out at once, sealed;
 * - reconnecting: the SDK lost the server and logs in again (it retries by itself).
 * @typedef {"stopped" | "connecting" | "ready" | "reconnecting"} RelayState
 */

/** @type {Readonly<Record<RelayState, readonly RelayState[]>>} */
const MOVES = {
  stopped: ["connecting"],
  connecting: ["ready", "reconnecting", "stopped"],
  ready: ["reconnecting", "stopped"],
  reconnecting: ["ready", "stopped"],
};

/** @type {Readonly<Record<RelayState, import("./connection.js").LinkState>>} */
const SHOWN = { stopped: "offline", connecting: "connecting", ready: "connected", reconnecting: "reconnecting" };

/**
 * @typedef {object} RelayCallbacks
 * @property {(message: import("./connection.js").Received) => void} onMessage every received envelope
 * @property {(state: import("./connection.js").LinkState) => void} onState
 * @property {(message: string) => void} onRefused the agent or the server will not talk to this pairing
 * @property {(message: string) => void} onProblem
 * @property {(fields: Record<string, unknown>) => object} hello the device.hello envelope with `fields`
 */

/** The relay path. */
export class RelayConnection {
  /** @param {RelayCallbacks} callbacks */
  constructor(callbacks) {
    this.cb = callbacks;
    /** @type {any} the SDK (untyped) once registered */
    this.sdk = null;
    /** @type {any} the relay library once loaded (see loadRelay) */
    this.wk = null;
    /** @type {object | null} the connect() whose library load is awaited */
    this.attempt = null;
    /** @type {Sealer | null} */
    this.sealer = null;
    /** @type {any} */
    this.pairing = null;
    /** envelopes (JSON) waiting for the next welcome */
    this.outbox = new Outbox();
    this.failedLogins = 0;
    /** @type {StateMachine<RelayState>} */
    this.machine = new StateMachine("relay connection", MOVES, "stopped", (state) => this.cb.onState(SHOWN[state]));
  }

  /** @returns {RelayState} */
  get state() {
    return this.machine.state;
  }

  /**
   * Log in with `pairing` and say hello (once the relay library is loaded); a previous login is dropped.
   * @param {any} pairing
   */
  connect(pairing) {
    this.disconnect();
    this.outbox.to(JSON.stringify([pairing?.agent, pairing?.uid]));
    this.pairing = pairing;
    this.machine.go("connecting");
    const attempt = (this.attempt = {});
    const current = () => this.attempt === attempt && this.state === "connecting";
    loadRelay().then(
      (wk) => current() && this.login(wk, pairing),
      (error) => {
        if (!current()) return;
        this.disconnect();
        this.cb.onProblem(`The relay code could not be loaded (${error.message}); it is tried again on the next connect.`);
      },
    );
  }

  /**
   * @param {any} wk the relay library
   * @param {any} pairing
   */
  login(wk, pairing) {
    this.wk = wk;
    this.sealer = new Sealer(pairing, wk);
    contentType = pairing.content_type || DEFAULT_CONTENT_TYPE;
    const sdk = wk.WKSDK.shared();
    if (!this.sdk) {
      sdk.register(contentType, () => new wk.LineUpContent());
      sdk.connectManager.addConnectStatusListener(
        (/** @type {number} */ status, /** @type {number} */ reason) => this.status(status, reason),
      );
      sdk.chatManager.addMessageListener((/** @type {any} */ message) => this.received(message));
      this.sdk = sdk;
    }
    Object.assign(sdk.config, { addr: pairing.ws, uid: pairing.uid, token: pairing.token });
    sdk.connectManager.connect();
  }

  /** Log out for good (the direct path is back, or the user disconnected). */
  disconnect() {
    this.attempt = null;
    if (this.sdk) this.sdk.connectManager.disconnect();
    this.machine.go("stopped");
  }

  /**
   * Send one envelope (JSON text), sealed; queued until the agent has welcomed us.
   * @param {string} text
   */
  send(text) {
    this.outbox.send(text, this.state === "ready", (text) => this.post(text));
  }

  /** @param {string} text */
  post(text) {
    const { Channel, ChannelTypePerson, LineUpContent } = this.wk;
    const content = new LineUpContent({ e2e: this.sealer.seal(text) });
    this.sdk.chatManager.send(content, new Channel(this.pairing.agent, ChannelTypePerson));
  }

  /**
   * @param {number} status
   * @param {number} reason
   */
  status(status, reason) {
    if (this.state === "stopped") return;
    const { ConnectStatus } = this.wk;
    if (status === ConnectStatus.Connected) {
      this.failedLogins = 0;
      this.post(JSON.stringify(this.cb.hello({ name: "LineUp web App (relay)" })));
    } else if (status === ConnectStatus.ConnectFail || status === ConnectStatus.ConnectKick) {
      this.disconnect();
      const what = status === ConnectStatus.ConnectKick ? "logged this App out" : "refused this App's login";
      this.cb.onRefused(
        `The relay server ${what} (code ${reason}): the pairing may have been revoked. Pair again on the LAN.`,
      );
    } else {
      if (this.state !== "ready") this.failedLogins += 1;
      this.machine.go("reconnecting");
      if (this.failedLogins === FAILED_LOGINS_TOLD) {
        this.cb.onProblem(
          "The relay server has not let this App log in several times in a row: it may be unreachable, " +
            "or this App's pairing was revoked (then pair it again on the LAN). Still trying.",
        );
      }
    }
  }

  /** @param {any} message */
  received(message) {
    if (this.state === "stopped" || !message.messageID || message.fromUID !== this.pairing.agent) return;
    const data = message.content instanceof this.wk.LineUpContent ? message.content.data : null;
    if (!data) return; // other content (e.g. text the agent posts for stock IM clients)
    if (data.refused) {
      this.disconnect();
      this.cb.onRefused(String(data.refused.message || "the agent refused this App's pairing"));
      return;
    }
    let text;
    try {
      text = this.sealer.open(data.e2e);
    } catch (error) {
      if (data.e2e?.p === this.pairing.id) this.cb.onProblem(`A relayed message was refused: ${error.message}`);
      return; // another device's copy, or a replay
    }
    let received;
    try {
      received = readEnvelope(text);
    } catch (error) {
      this.cb.onProblem(error.message);
      return;
    }
    if (received.kind === "device.welcome") this.welcome();
    this.cb.onMessage(received);
  }

  welcome() {
    this.machine.go("ready");
    this.outbox.flush((text) => this.post(text));
  }
}
