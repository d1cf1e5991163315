// @ts-check
// Files both ways: photos and files the user sends go up over the WebSocket in pieces
// (file.begin, then file.chunk); the files a message carries are shown (images) or offered as downloads.

import { h, svg } from "./dom.js";
import { newId } from "./envelope.js";

/** Bytes of file per file.chunk (its base64 fits a 1 MiB WebSocket frame with the envelope). */
export const CHUNK_BYTES = 512 * 1024;
/**
 * The size of one piece over the relay: the official WuKongIM JS SDK turns a message's bytes into
 * text with one `String.fromCharCode.apply` call, which overflows the stack past about 120,000
 * bytes, and a sealed envelope is about 1.8× the piece.
 */
export const RELAY_CHUNK_BYTES = 32 * 1024;
/** Pieces sent per second at most, so a large file never trips the agent's flood limit. */
const PIECES_PER_SECOND = 16;
/** Types the App shows as pictures; every other file is a download. */
const PICTURES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

/** A readable size: "820 B", "14 KB", "3.2 MB". */
export function readableSize(bytes) {
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1_000_000) return `${Math.round(bytes / 1000)} KB`;
  return `${(bytes / 1_000_000).toFixed(1)} MB`;
}

/** The SHA-256 of `buffer` in hex, or null where the browser has no crypto.subtle (plain-http pages). */
async function sha256(buffer) {
  if (!globalThis.crypto?.subtle) return null;
  const digest = await crypto.subtle.digest("SHA-256", buffer);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function toBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function fromBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/**
 * Sends files to the agent; `send(kind, payload)` is the connection's. `chunkBytes` is the size of
 * one piece, or a function asked at each upload (the path may change): over the relay, where an
 * envelope must fit a WuKongIM message, use `RELAY_CHUNK_BYTES` at most.
 */
export class Uploads {
  /**
   * @param {(kind: string, payload: object) => unknown} send
   * @param {number | (() => number)} chunkBytes
   */
  constructor(send, chunkBytes = CHUNK_BYTES) {
    this.send = send;
    this.chunkBytes = chunkBytes;
    this.pending = new Map(); // upload_id → {resolve, reject}
  }

  /** Upload `file` (a File or Blob with a name); resolves with the agent's attachment, rejects with its reason. */
  async upload(file) {
    const buffer = await file.arrayBuffer();
    const uploadId = `up-${newId()}`;
    const begin = {
      upload_id: uploadId,
      name: file.name || "photo.jpg",
      mime: file.type || "application/octet-stream",
      size: buffer.byteLength,
    };
    const hash = await sha256(buffer);
    if (hash) begin.sha256 = hash;
    const stored = new Promise((resolve, reject) => this.pending.set(uploadId, { resolve, reject }));
    this.send("file.begin", begin);
    const bytes = new Uint8Array(buffer);
    const size = typeof this.chunkBytes === "function" ? this.chunkBytes() : this.chunkBytes;
    for (let seq = 0, offset = 0; offset < bytes.length || seq === 0; seq += 1, offset += size) {
      if (!this.pending.has(uploadId)) break; // refused: send no more of it
      if (seq > 0 && seq % PIECES_PER_SECOND === 0) await new Promise((ok) => setTimeout(ok, 1000));
      const piece = toBase64(bytes.subarray(offset, offset + size));
      this.send("file.chunk", { upload_id: uploadId, seq, data: piece });
    }
    return stored;
  }

  /** The agent kept an upload (file.stored). */
  stored({ upload_id: uploadId, file }) {
    this.pending.get(uploadId)?.resolve(file);
    this.pending.delete(uploadId);
  }

  /** The agent refused an upload (an error with its upload_id); true if it was one of ours. */
  failed({ upload_id: uploadId, message }) {
    const waiting = this.pending.get(uploadId);
    if (!waiting) return uploadId !== undefined && uploadId !== null; // a later piece of a refused upload
    this.pending.delete(uploadId);
    waiting.reject(new Error(message));
    return true;
  }
}

/**
 * Where the App can load `file` from: its inline bytes as a blob (the agent sends them only by
 * relay, where its link may be out of reach: the App is away from the LAN), else the agent's link.
 */
function source(file) {
  if (file.data) return URL.createObjectURL(new Blob([fromBase64(file.data)], { type: file.mime }));
  if (file.blob) return URL.createObjectURL(file.blob);
  if (file.url) return file.url;
  return null;
}

/** A paperclip icon (drawn, so it shows without an emoji font). */
function clip() {
  const icon = svg("svg", { class: "glyph", viewBox: "0 0 24 24", "aria-hidden": "true" });
  icon.append(svg("path", { d: "M16 7l-7.5 7.5a2 2 0 0 0 3 3L19 10a4 4 0 0 0-6-6l-7.5 7.5a6 6 0 0 0 8.5 8.5L20 14" }));
  return icon;
}

/** The files of a message: pictures shown, other files as download links. */
export function attachmentList(files) {
  const items = files.map((file) => {
    const src = source(file);
    const label = `${file.name} (${readableSize(file.size)})`;
    if (PICTURES.has(file.mime) && src) {
      return h(
        "figure",
        { class: "attachment" },
        h("img", { src, alt: file.name, loading: "lazy" }),
        h("figcaption", {}, h("a", { href: src, download: file.name }, label)),
      );
    }
    if (!src) return h("span", { class: "attachment file" }, clip(), `${label} — too large to come through the relay`);
    return h("a", { class: "attachment file", href: src, download: file.name }, clip(), label);
  });
  return h("div", { class: "attachments" }, items);
}
