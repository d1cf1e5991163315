// @ts-check
// Pairing for the relay: what the App keeps to reach the agent through WuKongIM when it cannot
// reach it directly. Over the direct connection the App sends its public key to GET /api/pair (with
// the token) and keeps the answer; a link made by `lineup pair --link` carries the same in its
// fragment (#pair=..., which browsers never send), key pair included. Kept in localStorage.

import { fromB64url, newKeyPair } from "./e2e.js";
import { socketUrl } from "./credentials.js";

const PAIRING_KEY = "lineup.pairing";
const FIELDS = ["id", "ws", "uid", "token", "agent", "agent_key", "secret"];

/** The stored pairing ({id, ws, uid, token, agent, agent_key, secret, content_type}), or null. */
export function loadPairing() {
  try {
    const pairing = JSON.parse(localStorage.getItem(PAIRING_KEY) || "null");
    return pairing && FIELDS.every((f) => typeof pairing[f] === "string" && pairing[f]) ? pairing : null;
  } catch {
    return null;
  }
}

function savePairing(pairing) {
  if (!FIELDS.every((f) => typeof pairing[f] === "string" && pairing[f])) throw new Error("incomplete pairing");
  localStorage.setItem(PAIRING_KEY, JSON.stringify(pairing));
  return pairing;
}

/** Forget the pairing (revoked on the agent). */
export function forgetPairing() {
  localStorage.removeItem(PAIRING_KEY);
}

/** Take a pairing out of location.hash (#pair=<base64url JSON>), store it and clean the address bar. */
export function takePairingFromFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const text = params.get("pair");
  if (text === null) return null;
  params.delete("pair");
  const rest = params.toString();
  history.replaceState(history.state, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  try {
    return savePairing(JSON.parse(new TextDecoder().decode(fromB64url(text))));
  } catch (error) {
    throw new Error(`The pairing link is damaged (${error.message}); make a new one with lineup pair --link.`);
  }
}

/**
 * Pair over the direct connection to `host` with `token`. Resolves to the stored pairing, or null
 * when the agent runs no relay ({"relay": false}; 404 from an older agent). Keeps an existing
 * pairing with the same agent key. Asks first without a key, so an agent without a relay costs one
 * small request and the relay library (vendor/relay.js, needed for the key) is fetched only when
 * there is a relay to pair for.
 */
export async function pairOverDirect(host, token) {
  const url = socketUrl(host).replace(/^ws/, "http").replace(/\/ws$/, "/api/pair");
  const probe = await fetch(url, { headers: { Authorization: `Bearer ${token}` }, cache: "no-store" });
  if (probe.status === 404) return null;
  if (probe.ok && (await probe.json().catch(() => ({}))).relay === false) return null;
  const keys = await newKeyPair();
  const response = await fetch(url, {
    headers: { Authorization: `Bearer ${token}`, "X-LineUp-Key": keys.public },
    cache: "no-store",
  });
  if (response.status === 404) return null;
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `pairing failed (${response.status})`);
  return savePairing({ ...body, secret: keys.secret });
}
