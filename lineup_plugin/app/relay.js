// The App's connection through WuKongIM (the official JS SDK, bundled in vendor/relay.js): logs in
// as the App user of its pairing, says device.hello to the agent (the agent then re-sends every
// live card and closes the ones that ended meanwhile: that is how cards sent while this device
// was offline reach it) and exchanges LineUp envelopes sealed end to end (e2e.js).

import { APP_VERSION, PROTOCOL_VERSION, deviceId, makeEnvelope, readEnvelope } from "./envelope.js";
import { Sealer, relayLibrary } from "./e2e.js";

const DEFAULT_CONTENT_TYPE = 9527;
// WuKongIM v2 answers a wrong token with silence and a close: after this many closes in a row
// without a login, say what it may mean (the SDK keeps retrying).
const FAILED_LOGINS_TOLD = 3;

let contentType = DEFAULT_CONTENT_TYPE;

/** The relay library with LineUp's custom content class, once it is loaded (see relayLibrary in e2e.js). */
let wk = null;

/** LineUp custom content: {"type": 9527, "e2e": {...}} (or the agent's {"refused": {...}} in clear). */
function lineUpContent(MessageContent) {
  return class LineUpContent extends MessageContent {
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
    decodeJSON(content) {
      this.data = content;
    }
  };
}

async function loadRelay() {
  if (!wk) {
    const library = await relayLibrary();
    wk = { ...library, LineUpContent: lineUpContent(library.MessageContent) };
  }
  return wk;
}

/**
 * The relay path. Callbacks: onMessage({kind, payload, envelope}), onState(state) ("connecting" |
 * "connected" | "reconnecting" | "offline"), onRefused(message) when the agent or the server will
 * not talk to this pairing, onProblem(message), openCalls(), resume() (history fields of the hello).
 */
export class RelayConnection {
  constructor(callbacks) {
    this.cb = callbacks;
    this.sdk = null;
    this.sealer = null;
    this.pairing = null;
    this.active = false;
    this.ready = false;
    this.outbox = [];
    this.failedLogins = 0;
  }

  /** Log in with `pairing` and say hello (once the relay library is loaded); a previous login is dropped. */
  connect(pairing) {
    this.disconnect();
    this.pairing = pairing;
    this.active = true;
    this.cb.onState("connecting");
    const attempt = (this.attempt = {});
    loadRelay().then(
      (library) => this.active && this.attempt === attempt && this.login(library, pairing),
      (error) => this.active && this.attempt === attempt && this.unloaded(error),
    );
  }

  /** The relay library could not be fetched (the agent's address is out of reach): say so, stay reconnecting. */
  unloaded(error) {
    this.cb.onState("reconnecting");
    this.cb.onProblem(`The relay code could not be loaded (${error.message}); it is tried again on the next reconnect.`);
  }

  login(library, pairing) {
    const { WKSDK, LineUpContent } = library;
    this.sealer = new Sealer(pairing, library);
    contentType = pairing.content_type || DEFAULT_CONTENT_TYPE;
    const sdk = WKSDK.shared();
    if (!this.sdk) {
      sdk.register(contentType, () => new LineUpContent());
      sdk.connectManager.addConnectStatusListener((status, reason) => this.status(status, reason));
      sdk.chatManager.addMessageListener((message) => this.received(message));
      this.sdk = sdk;
    }
    Object.assign(sdk.config, { addr: pairing.ws, uid: pairing.uid, token: pairing.token });
    sdk.connectManager.connect();
  }

  /** Log out for good (the direct path is back, or the user disconnected). */
  disconnect() {
    const was = this.active;
    this.active = false;
    this.ready = false;
    if (this.sdk) this.sdk.connectManager.disconnect();
    if (was) this.cb.onState("offline");
  }

  /** Send `payload` as a `kind` envelope, sealed; queued until the agent has welcomed us. Returns its id. */
  send(kind, payload) {
    const envelope = makeEnvelope(kind, payload);
    const text = JSON.stringify(envelope);
    if (this.ready) this.post(text);
    else this.outbox.push(text);
    return envelope.id;
  }

  post(text) {
    const { Channel, ChannelTypePerson, LineUpContent } = wk;
    const content = new LineUpContent({ e2e: this.sealer.seal(text) });
    this.sdk.chatManager.send(content, new Channel(this.pairing.agent, ChannelTypePerson));
  }

  status(status, reason) {
    if (!this.active) return;
    const { ConnectStatus } = wk;
    if (status === ConnectStatus.Connected) {
      this.failedLogins = 0;
      const hello = {
        device_id: deviceId(),
        app_version: APP_VERSION,
        protocol_version: PROTOCOL_VERSION,
        name: "LineUp web App (relay)",
        open_calls: this.cb.openCalls(),
        ...this.cb.resume?.(), // where the history resumes: last_seq, history_id
      };
      this.post(JSON.stringify(makeEnvelope("device.hello", hello)));
    } else if (status === ConnectStatus.ConnectFail || status === ConnectStatus.ConnectKick) {
      this.disconnect();
      const what = status === ConnectStatus.ConnectKick ? "logged this App out" : "refused this App's login";
      this.cb.onRefused(
        `The relay server ${what} (code ${reason}): the pairing may have been revoked. Pair again on the LAN.`,
      );
    } else {
      if (!this.ready) this.failedLogins += 1;
      this.ready = false;
      this.cb.onState("reconnecting");
      if (this.failedLogins === FAILED_LOGINS_TOLD) {
        this.cb.onProblem(
          "The relay server has not let this App log in several times in a row: it may be unreachable, " +
            "or this App's pairing was revoked (then pair it again on the LAN). Still trying.",
        );
      }
    }
  }

  received(message) {
    if (!this.active || !message.messageID || message.fromUID !== this.pairing.agent) return;
    const data = message.content instanceof wk.LineUpContent ? message.content.data : null;
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
    this.ready = true;
    this.cb.onState("connected");
    for (const text of this.outbox.splice(0)) this.post(text);
  }
}
