// @ts-check
// LineUp v1 envelopes: ids, the device identity, building and reading messages.

export const PROTOCOL_VERSION = 1;
export const TYPE_PREFIX = "lineup.v1.";
export const APP_VERSION = "0.1.0";

/** A random UUID; crypto.randomUUID only exists in secure contexts (https, localhost), so fall back. */
export function newId() {
  if (globalThis.crypto?.randomUUID) {
    try {
      return crypto.randomUUID();
    } catch {
      // not a secure context in some browsers: fall through
    }
  }
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const DEVICE_KEY = "lineup.device_id";

/** This browser's device id, created once and kept in localStorage. */
export function deviceId() {
  let id = localStorage.getItem(DEVICE_KEY);
  if (!id) {
    id = `web-${newId()}`;
    localStorage.setItem(DEVICE_KEY, id);
  }
  return id;
}

/** The agent id the App assumes until the agent says its own. */
export const DEFAULT_AGENT = "lineup-agent";

/**
 * Build an envelope of `kind` (e.g. "tool.result") from this device to agent `agentId`, in
 * conversation `conversationId`.
 * @param {string} kind
 * @param {object} payload
 * @param {{agentId: string, conversationId: string}} to
 */
export function makeEnvelope(kind, payload, { agentId, conversationId }) {
  return {
    v: PROTOCOL_VERSION,
    id: newId(),
    type: TYPE_PREFIX + kind,
    conversation_id: conversationId,
    sender: { kind: "device", id: deviceId() },
    target: { kind: "agent", id: agentId },
    timestamp: new Date().toISOString(),
    payload,
  };
}

/**
 * Read one received text frame. Returns {kind, payload, envelope}; throws Error with a readable
 * message for anything that is not a v1 envelope (an unknown major version is never acted on).
 * @param {string} text
 * @returns {import("./connection.js").Received}
 */
export function readEnvelope(text) {
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    throw new Error("the agent sent a message that is not JSON");
  }
  if (!data || typeof data !== "object") throw new Error("the agent sent a message that is not an object");
  if (data.v !== PROTOCOL_VERSION) throw new Error(`the agent speaks protocol v${data.v}; this App speaks v1`);
  if (typeof data.type !== "string" || !data.type.startsWith(TYPE_PREFIX)) {
    throw new Error(`unknown message type ${JSON.stringify(data.type)}`);
  }
  const payload = data.payload && typeof data.payload === "object" ? data.payload : {};
  return { kind: data.type.slice(TYPE_PREFIX.length), payload, envelope: data };
}
