// @ts-check
// The cards of every tool call: one card per call_id, acknowledged when shown, answered once,
// concluded by the agent's verdict (how the call ended, sent to every device; outcome.js).

import { Card } from "./card.js";
import { calculator } from "./calculator.js";
import { canvas } from "./canvas.js";
import { choice } from "./choice.js";
import { confirm } from "./confirm.js";
import { input } from "./input.js";
import { PluginRenderers, broken } from "./plugins.js";
import { unsupported } from "./unsupported.js";
import { h } from "../dom.js";
import { deviceId } from "../envelope.js";

/** how many open cards a device.hello names at most (the agent refuses a longer list) */
const MAX_OPEN_CALLS = 1000;
const IDS_KEY = "lineup.device_ids";
/** how many ids the agent gave this device (one per relay pairing) are kept */
const MAX_IDS = 8;
/** how many endings of calls not drawn yet are kept (an older page draws them) */
const ENDINGS_KEPT = 1000;

/** The ids other than its own that the agent welcomed this device as (kept in localStorage). */
function knownIds() {
  try {
    const ids = JSON.parse(localStorage.getItem(IDS_KEY) ?? "[]");
    return Array.isArray(ids) ? ids.filter((id) => typeof id === "string") : [];
  } catch {
    return [];
  }
}

/** Renderer of each built-in App tool; `interactive` ones wait for the user, the others answer at once. */
export const RENDERERS = { choice, confirm, input, calculator, canvas };

export class Deck {
  /**
   * `show(element)` puts a card in the feed; `send(kind, payload)` sends to the agent; `ownId` is
   * the id this surface answers as (an outcome naming it was answered here; default: this device's).
   */
  constructor({ show, send, boards, ownId = undefined }) {
    this.show = show;
    this.send = send;
    this.ownId = ownId ?? null;
    this.context = { boards, h };
    this.cards = new Map();
    /** @type {Map<string, import("./outcome.js").Outcome>} how calls ended whose call entry is in an older page not shown yet */
    this.endings = new Map();
    /** renderers plugins ship for their tools (refreshed on every welcome) */
    this.plugins = new PluginRenderers();
  }

  /** A tool.call arrived. A repeated call_id is not shown again: it is re-acknowledged or re-answered. */
  call(request) {
    const { call_id: callId } = request;
    if (typeof callId !== "string" || typeof request.name !== "string") return;
    const known = this.cards.get(callId);
    if (known?.restored && !known.closed) known.restored = false; // shown from the history and still live: answerable
    if (known) {
      if (known.result) this.send("tool.result", known.result); // our answer may have been lost in a reconnect
      else if (!known.dismissed && known.interactive) this.send("tool.ack", { call_id: callId, stage: "waiting_user" });
      return;
    }
    if (Object.hasOwn(RENDERERS, request.name)) {
      const renderer = RENDERERS[request.name];
      const card = new Card(request, this.send, renderer);
      this.cards.set(callId, card);
      if (!renderer.interactive) this.send("tool.ack", { call_id: callId, stage: "acknowledged" });
      this.draw(card, renderer);
      return;
    }
    // Another tool: its plugin's renderer, loaded first (the card exists meanwhile: repeats and cancels find it).
    const card = new Card(request, this.send, { label: request.name, interactive: true });
    this.cards.set(callId, card);
    this.send("tool.ack", { call_id: callId, stage: "acknowledged" });
    this.plugins
      .find(request.name)
      .then((renderer) => renderer ?? unsupported, (error) => broken(request.name, error))
      .then((renderer) => {
        card.use(renderer);
        this.draw(card, renderer);
      });
  }

  /** Render `card` with `renderer`, show it, and say it waits for the user if it does. */
  draw(card, renderer) {
    const request = card.call;
    if (!card.closed) {
      try {
        const drawn = renderer.render(card, request.arguments ?? {}, this.context);
        if (drawn && typeof drawn.then === "function") drawn.catch((error) => this.failed(card, error));
      } catch (error) {
        this.failed(card, error);
      }
    }
    if (renderer.visible?.(request) ?? true) this.show(card.el);
    if (renderer.interactive && !card.closed) {
      this.send("tool.ack", { call_id: request.call_id, stage: "waiting_user" });
    }
  }

  /** A renderer threw: the agent gets `failed` (if the card was not answered yet), the App goes on. */
  failed(card, error) {
    card.answer("failed", { message: `the App could not show this call: ${error?.message || error}` });
  }

  /**
   * tool.cancel: the call ended — with the agent's verdict (`outcome`: the answer that won and the
   * device that gave it, or how it ended) shown on the card, answered here or not. Without an
   * outcome (an older agent) the card is greyed out with the reason.
   * @param {{call_id: string, reason?: string | null, outcome?: import("./outcome.js").Outcome | null}} notice
   */
  cancel({ call_id: callId, reason, outcome }) {
    const card = this.cards.get(callId);
    if (!card) return;
    if (outcome && typeof outcome === "object" && typeof outcome.status === "string") card.conclude(outcome, this.own());
    else card.dismiss(reason);
  }

  /** A history call.end entry: how the call ended and on which device (`device_id`, `device_name`). */
  ended(entry) {
    const result = entry.result;
    const { status, result: answer } = result;
    const outcome = { status, result: answer, device_id: entry.device_id, device_name: entry.device_name };
    const card = this.cards.get(result?.call_id);
    if (card) card.conclude(outcome, this.own());
    else if (typeof result?.call_id === "string") {
      // its call comes in an older page (the history comes newest page first): concluded when drawn
      this.endings.set(result.call_id, outcome);
      if (this.endings.size > ENDINGS_KEPT) this.endings.delete(this.endings.keys().next().value);
    }
  }

  /** The ids the agent knows this surface by: its own, and those the agent's welcomes gave it (a relay pairing's). */
  own() {
    if (this.ownId !== null) return new Set([this.ownId]);
    return new Set([deviceId(), ...knownIds()]);
  }

  /**
   * The agent welcomed this device as `id` (device.welcome): an outcome naming it was answered
   * here. Kept for the next load (the history names the device so too).
   */
  welcomed(id) {
    if (this.ownId !== null || typeof id !== "string" || !id || id === deviceId()) return;
    const ids = knownIds().filter((known) => known !== id);
    ids.push(id);
    try {
      localStorage.setItem(IDS_KEY, JSON.stringify(ids.slice(-MAX_IDS)));
    } catch {
      // storage full or refused: this load still knows it from the welcome of the next connect
    }
  }

  /** This device's answer, drawn again after a reload: its card waits for the verdict. */
  answered(result) {
    this.cards.get(result?.call_id)?.answered(result);
  }

  /** The link to the agent is up or down: cards waiting for their verdict say whether their answer can go. */
  link(state) {
    for (const card of this.cards.values()) card.link(state === "connected");
  }

  /** An error about one of our calls (e.g. our answer came too late): say so on its card, unless its verdict says it. */
  problem({ call_id: callId, message }) {
    const card = this.cards.get(callId);
    if (card && !card.verdict) card.note(`The agent did not take this answer: ${message}`);
    return Boolean(card);
  }

  /**
   * A call from the history: drawn like a live one (a canvas board is rebuilt) but nothing is
   * sent until the agent delivers it live again; `settle` then shows how it ended.
   */
  restore(request) {
    const { call_id: callId } = request;
    if (typeof callId !== "string" || typeof request.name !== "string" || this.cards.has(callId)) return;
    const renderer = Object.hasOwn(RENDERERS, request.name) ? RENDERERS[request.name] : unsupported;
    const card = new Card(request, (...message) => (card.restored ? undefined : this.send(...message)), renderer);
    card.restored = true;
    this.cards.set(callId, card);
    try {
      renderer.render(card, request.arguments ?? {}, this.context);
    } catch {
      // it was shown once; how it ended follows
    }
    if (renderer.visible?.(request) ?? true) this.show(card.el);
    const outcome = this.endings.get(callId);
    if (outcome) {
      this.endings.delete(callId);
      card.conclude(outcome, this.own());
    }
  }

  /** Forget every card (the agent's history starts over). */
  clear() {
    this.cards.clear();
    this.endings.clear();
  }

  /**
   * Calls whose cards still wait: for the user, or for the verdict on an answer given here (sent
   * in device.hello on every reconnect: the agent re-sends the live ones and says how the others ended).
   */
  openCalls() {
    const open = [...this.cards.values()].filter((card) => !card.closed || card.sending);
    return open.slice(-MAX_OPEN_CALLS).map((card) => card.call.call_id); // the newest, as many as a hello carries
  }
}
