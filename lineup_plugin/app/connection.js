// The WebSocket to the agent: hello with the token, automatic reconnect with backoff, and an
// outbox so nothing the user does while reconnecting is lost.

import { APP_VERSION, PROTOCOL_VERSION, deviceId, makeEnvelope, readEnvelope } from "./envelope.js";
import { socketUrl } from "./credentials.js";

export const AUTH_FAILED_CODE = 4401;
const MAX_DELAY_MS = 10_000;

/** Explain a close that happened before the agent welcomed us. */
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
 * One logical connection to the agent. Callbacks:
 * - onMessage({kind, payload, envelope}) for every received envelope,
 * - onState(state) with "connecting" | "connected" | "reconnecting" | "offline",
 * - onAuthFailed() when the agent refused the token,
 * - onUnreachable(message) when the first connection attempt failed,
 * - onProblem(message) for a received frame that could not be read,
 * - openCalls() → call ids of the cards still waiting for the user (sent in device.hello),
 * - resume() → the history fields of device.hello ({last_seq, history_id}).
 */
export class Connection {
  constructor(callbacks) {
    this.cb = callbacks;
    this.host = "";
    this.token = "";
    this.welcomed = false; // welcomed since connect(): a later close means reconnect, not "unreachable"
    this.ws = null;
    this.ready = false;
    this.stopped = true;
    this.outbox = [];
    this.attempts = 0;
    this.timer = null;
    addEventListener("online", () => this.retryNow());
  }

  /** Connect to `host` with `token`; a previous connection is dropped. */
  connect(host, token) {
    this.disconnect();
    Object.assign(this, { host, token, stopped: false, welcomed: false, attempts: 0 });
    this.open();
  }

  /** Close for good (no reconnect). */
  disconnect() {
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.ws;
    this.ws = null;
    this.ready = false;
    if (ws) ws.close(1000, "closed by the user");
    this.cb.onState("offline");
  }

  /** Send `payload` as a `kind` envelope now, or as soon as the agent has welcomed us again. */
  send(kind, payload) {
    const envelope = makeEnvelope(kind, payload);
    const text = JSON.stringify(envelope);
    if (this.ready && this.ws?.readyState === WebSocket.OPEN) this.ws.send(text);
    else this.outbox.push(text);
    return envelope.id;
  }

  /** Skip the backoff wait (the browser came back online). */
  retryNow() {
    if (!this.stopped && !this.ws) {
      clearTimeout(this.timer);
      this.open();
    }
  }

  open() {
    this.cb.onState(this.welcomed ? "reconnecting" : "connecting");
    let ws;
    try {
      ws = new WebSocket(socketUrl(this.host));
    } catch {
      this.stopped = true;
      this.cb.onUnreachable(`"${this.host}" is not a valid host name or address.`);
      return;
    }
    this.ws = ws;
    let opened = false;
    let authFailed = false;
    ws.onopen = () => {
      opened = true;
      const hello = {
        device_id: deviceId(),
        app_version: APP_VERSION,
        protocol_version: PROTOCOL_VERSION,
        token: this.token,
        name: "LineUp web App",
        open_calls: this.cb.openCalls(),
        ...this.cb.resume?.(), // where the history resumes: last_seq, history_id
      };
      ws.send(JSON.stringify(makeEnvelope("device.hello", hello)));
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
      if (message.kind === "device.welcome") this.welcome();
      this.cb.onMessage(message);
    };
    ws.onclose = (event) => {
      if (ws !== this.ws) return;
      this.ws = null;
      this.ready = false;
      if (this.stopped) return;
      if (authFailed || event.code === AUTH_FAILED_CODE) {
        this.stopped = true;
        this.cb.onState("offline");
        this.cb.onAuthFailed();
      } else if (!this.welcomed) {
        this.stopped = true;
        this.cb.onState("offline");
        this.cb.onUnreachable(refusal(this.host, opened, event));
      } else {
        this.scheduleReconnect();
      }
    };
  }

  welcome() {
    this.ready = true;
    this.welcomed = true;
    this.attempts = 0;
    this.cb.onState("connected");
    const queued = this.outbox.splice(0);
    for (const text of queued) this.ws.send(text);
  }

  scheduleReconnect() {
    this.cb.onState("reconnecting");
    const delay = Math.min(MAX_DELAY_MS, 500 * 2 ** this.attempts) * (0.8 + Math.random() * 0.4);
    this.attempts += 1;
    this.timer = setTimeout(() => this.open(), delay);
  }
}
