// @ts-check
// End-to-end encryption of LineUp envelopes over the relay (the agent's side:
// lineup_plugin/transports/wukongim/e2e.py, which states the format). X25519 + HKDF-SHA256 +
// AES-256-GCM from the audited noble libraries bundled in vendor/relay.js: WebCrypto does not exist
// on a page served over plain http from a LAN address (not a secure context), where this App runs.
// vendor/relay.js is fetched only when the relay is used (pairing or a relay connection): a
// direct-only App never downloads it.

const VERSION = 1;
const INFO = new TextEncoder().encode("lineup-e2e-v1");
const WINDOW = 1024;
const FLOOR_PREFIX = "lineup.e2e.floor.";
const SENT_PREFIX = "lineup.e2e.sent."; // the last counter sent: never reused, even if the clock goes back

/** Unpadded base64url of bytes. */
export function b64url(bytes) {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Bytes of unpadded base64url `text`; throws on anything else. */
export function fromB64url(text, size) {
  if (typeof text !== "string") throw new Error("not base64url");
  const raw = atob(text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4));
  const bytes = Uint8Array.from(raw, (c) => c.charCodeAt(0));
  if (size !== undefined && bytes.length !== size) throw new Error(`expected ${size} bytes, got ${bytes.length}`);
  return bytes;
}

let library = null;

/** The relay library (vendor/relay.js: the WuKongIM JS SDK and the noble primitives), fetched once when first needed. */
export function relayLibrary() {
  library ??= import("./vendor/relay.js").catch((error) => {
    library = null; // a failed fetch (offline) is tried again next time
    throw error;
  });
  return library;
}

/** A new X25519 key pair: {secret, public} as base64url. */
export async function newKeyPair() {
  const { x25519 } = await relayLibrary();
  const secret = x25519.utils.randomSecretKey();
  return { secret: b64url(secret), public: b64url(x25519.getPublicKey(secret)) };
}

const aad = (id, from, to, counter) => new TextEncoder().encode(`lineup-e2e-v1|${id}|${from}|${to}|${counter}`);

/** One pairing seen from the App: seals what goes to the agent, opens what comes from it. */
export class Sealer {
  /** `pairing`: {id, uid, agent, agent_key, secret} (see pairing.js); `library`: what relayLibrary() gave. */
  constructor(pairing, library) {
    const { gcm, hkdf, sha256, x25519 } = library;
    this.gcm = gcm;
    const shared = x25519.getSharedSecret(fromB64url(pairing.secret, 32), fromB64url(pairing.agent_key, 32));
    const okm = hkdf(sha256, shared, new TextEncoder().encode(pairing.id), INFO, 64);
    this.fromAgent = okm.slice(0, 32);
    this.toAgent = okm.slice(32);
    this.pairing = pairing;
    this.sentKey = SENT_PREFIX + pairing.id;
    this.counter = Number(localStorage.getItem(this.sentKey) || 0);
    this.floorKey = FLOOR_PREFIX + pairing.id;
    this.floor = Number(localStorage.getItem(this.floorKey) || 0);
    this.recent = [];
  }

  /** The e2e box carrying envelope `text` to the agent. */
  seal(text) {
    this.counter = Math.max(this.counter + 1, Date.now() * 1000);
    localStorage.setItem(this.sentKey, String(this.counter));
    const iv = crypto.getRandomValues(new Uint8Array(12));
    const { id, uid, agent } = this.pairing;
    const sealed = this.gcm(this.toAgent, iv, aad(id, uid, agent, this.counter)).encrypt(new TextEncoder().encode(text));
    return { v: VERSION, p: id, n: this.counter, iv: b64url(iv), c: b64url(sealed) };
  }

  /** The envelope text of a box from the agent; throws if it is tampered, replayed or for another pairing. */
  open(box) {
    const { id, uid, agent } = this.pairing;
    if (!box || box.v !== VERSION || box.p !== id) throw new Error("not for this pairing");
    const counter = box.n;
    if (!Number.isSafeInteger(counter) || counter < 0) throw new Error("bad counter");
    let plain;
    try {
      plain = this.gcm(this.fromAgent, fromB64url(box.iv, 12), aad(id, agent, uid, counter)).decrypt(fromB64url(box.c));
    } catch {
      throw new Error("the message does not authenticate (tampered, or another key)");
    }
    if (counter <= this.floor || this.recent.includes(counter)) throw new Error("replayed message");
    this.recent.push(counter);
    this.recent.sort((a, b) => a - b);
    if (this.recent.length > WINDOW) this.floor = this.recent.shift();
    localStorage.setItem(this.floorKey, String(Math.max(this.floor, this.recent.at(-1))));
    return new TextDecoder("utf-8", { fatal: true }).decode(plain);
  }
}
