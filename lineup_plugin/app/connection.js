// @ts-check
// The WebSocket to the agent: hello with the token, automatic reconnect with backoff, and an
// outbox so nothing the user does while reconnecting is lost.

import { readEnvelope } from "./envelope.js";
import { socketUrl } from "./credentials.js";
import { StateMachine } from "./machine.js";
import { Outbox } from "./outbox.js";

export const AUTH_FAILED_CODE = 4401;
const MAX_DELAY_MS = 10_000;

/**
 * What the App shows of a connection: "connecting" | "connected" | "reconnecting" | "offline".
 * @typedef {"connecting" | "connected" | "reconnecting" | "offline"} LinkState
 */

/**
 * @typedef {object} Received a received envelope, read
 * @property {string} kind its type without the "lineup.v1." prefix
 * @property {Record<string, any>} payload
 * @property {Record<string, any>} envelope the whole envelope
 */

/**
 * The states of a direct connection:
 * - stopped: not connected and not trying (before connect, after disconnect, a refused token or
 *   an agent that could not be reached at the first attempt);
 * - connecting: the first attempt since connect(): the socket opens, device.hello is sent;
 * - ready: the agent welcomed us; what is sent goes out at once;
 * - waiting: the connection dropped after a welcome; the next attempt is on a backoff timer;
 * - reconnecting: a later attempt, like connecting.
 * @typedef {"stopped" | "connecting" | "ready" | "waiting" | "reconnecting"} DirectState
 */

/** @type {Readonly<Record<DirectState, readonly DirectState[]>>} */
const MOVES = {
  stopped: ["connecting"],
  connecting: ["ready", "stopped"],
  ready: ["waiting", "stopped"],
  waiting: ["reconnecting", "stopped"],
  reconnecting: ["ready", "waiting", "stopped"],
};

/** @type {Readonly<Record<DirectState, LinkState>>} */
const SHOWN = {
  stopped: "offline",
  connecting: "connecting",
  ready: "connected",
  waiting: "reconnecting",
  reconnecting: "reconnecting",
};

/**
 * Explain a close that happened before the agent welcomed us.
 * @param {string} host
 * @param {boolean} opened
 * @param {CloseEvent} event
 */
function refusal(host, opened, event) {
  if (!opened) {
    const origin =
      host === location.host ? "" : " It also refuses pages it did not serve itself, unless its allowed_origins lists them.";
    return `Cannot reach the agent at ${host}. Check that it is running and that this device can reach it.${origin}`;
  }
  const why = event.reason ? `: ${event.reason}` : "";
  return `The agent at ${host} closed the connection (code ${event.code}${why}).`;
}

/**
 * @typedef {object} ConnectionCallbacks
 * @property {(message: Received) => void} onMessage every received envelope
 * @property {(state: LinkState) => void} onState
 * @property {() => void} onAuthFailed the agent refused the token
 * @property {(message: string) => void} onUnreachable the first connection attempt failed
 * @property {(message: string) => void} onProblem a received frame could not be read
 * @property {(fields: Record<string, unknown>) => object} hello the device.hello envelope with `fields`
 */

/** One logical connection to the agent. */
export class Connection {
  /** @param {ConnectionCallbacks} callbacks */
  constructor(callbacks) {
    this.cb = callbacks;
    this.host = "";
    this.token = "";
    /** @type {WebSocket | null} */
    this.ws = null;
    /** envelopes (JSON) waiting for the next welcome */
    this.outbox = new Outbox();
    this.attempts = 0;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.timer = undefined;
    /** @type {StateMachine<DirectState>} */
    this.machine = new StateMachine("direct connection", MOVES, "stopped", (state) => this.cb.onState(SHOWN[state]));
    addEventListener("online", () => this.retryNow());
  }

  /** @returns {DirectState} */
  get state() {
    return this.machine.state;
  }

  /**
   * Connect to `host` with `token`; a previous connection is dropped.
   * @param {string} host
   * @param {string} token
   */
  connect(host, token) {
    this.disconnect();
    this.outbox.to(JSON.stringify([host, token]));
    Object.assign(this, { host, token, attempts: 0 });
    this.open("connecting");
  }

  /** Close for good (no reconnect). */
  disconnect() {
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000, "closed by the user");
    this.machine.go("stopped");
  }

  /**
   * Send one envelope (JSON text) now, or as soon as the agent has welcomed us again.
   * @param {string} text
   */
  send(text) {
    const ws = this.ws;
    this.outbox.send(text, this.state === "ready" && ws?.readyState === WebSocket.OPEN, (text) => ws?.send(text));
  }

  /** Skip the backoff wait (the browser came back online, the page became visible, the user asked). */
  retryNow() {
    if (this.state !== "waiting") return;
    clearTimeout(this.timer);
    this.open("reconnecting");
  }

  /** @param {"connecting" | "reconnecting"} attempt */
  open(attempt) {
    let ws;
    try {
      ws = new WebSocket(socketUrl(this.host));
    } catch {
      this.disconnect();
      this.cb.onUnreachable(`"${this.host}" is not a valid host name or address.`);
      return;
    }
    this.machine.go(attempt);
    this.ws = ws;
    let opened = false;
    let authFailed = false;
    ws.onopen = () => {
      opened = true;
      ws.send(JSON.stringify(this.cb.hello({ token: this.token, name: "LineUp web App" })));
    };
    ws.onmessage = (event) => {
      if (ws !== this.ws) return;
      let message;
      try {
        message = readEnvelope(typeof event.data === "string" ? event.data : "");
      } catch (error) {
        this.cb.onProblem(error.message);
        return;
      }
      if (message.kind === "error" && message.payload.code === "auth_failed") authFailed = true;
      if (message.kind === "device.welcome") this.welcome(ws);
      this.cb.onMessage(message);
    };
    ws.onclose = (event) => {
      if (ws !== this.ws) return;
      this.ws = null;
      if (authFailed || event.code === AUTH_FAILED_CODE) {
        this.machine.go("stopped");
        this.cb.onAuthFailed();
      } else if (this.state === "connecting") {
        this.machine.go("stopped");
        this.cb.onUnreachable(refusal(this.host, opened, event));
      } else {
        this.scheduleReconnect();
      }
    };
  }

  /** @param {WebSocket} ws */
  welcome(ws) {
    this.attempts = 0;
    this.machine.go("ready");
    this.outbox.flush((text) => ws.send(text));
  }

  scheduleReconnect() {
    this.machine.go("waiting");
    const delay = Math.min(MAX_DELAY_MS, 500 * 2 ** this.attempts) * (0.8 + Math.random() * 0.4);
    this.attempts += 1;
    this.timer = setTimeout(() => this.open("reconnecting"), delay);
  }
}
