// @ts-check
// The cards of every tool call: one card per call_id, acknowledged when shown, answered once,
// dismissed when the agent withdraws the call.

import { Card } from "./card.js";
import { calculator } from "./calculator.js";
import { canvas } from "./canvas.js";
import { choice } from "./choice.js";
import { confirm } from "./confirm.js";
import { input } from "./input.js";
import { PluginRenderers, broken } from "./plugins.js";
import { unsupported } from "./unsupported.js";
import { h } from "../dom.js";

/** Renderer of each built-in App tool; `interactive` ones wait for the user, the others answer at once. */
export const RENDERERS = { choice, confirm, input, calculator, canvas };

export class Deck {
  /** `show(element)` puts a card in the feed; `send(kind, payload)` sends to the agent. */
  constructor({ show, send, boards }) {
    this.show = show;
    this.send = send;
    this.context = { boards, h };
    this.cards = new Map();
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

  /** tool.cancel: the call ended elsewhere (answered on another device, expired, stopped...). */
  cancel({ call_id: callId, reason }) {
    this.cards.get(callId)?.dismiss(reason);
  }

  /** An error about one of our calls (e.g. our answer came too late): say so on its card. */
  problem({ call_id: callId, message }) {
    const card = this.cards.get(callId);
    if (card) card.note(`The agent did not take this answer: ${message}`);
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
  }

  /** How a call ended, from the history: `text` on its card, `where` it was answered. */
  settle(callId, result, text, where) {
    const card = this.cards.get(callId);
    if (!card) return;
    if (!card.closed) {
      card.result = result;
      card.settle(result.status, text);
      if (result.status === "completed" && "selected" in (result.result ?? {})) {
        for (const button of card.el.querySelectorAll("button")) {
          button.classList.toggle("chosen", button.textContent === String(result.result.selected));
        }
      }
    }
    if (where && card.interactive && !card.el.querySelector(".card-where")) card.el.append(Object.assign(document.createElement("p"), { className: "card-where", textContent: where }));
  }

  /** Forget every card (the agent's history starts over). */
  clear() {
    this.cards.clear();
  }

  /** Calls whose cards still wait for the user (sent in device.hello on every reconnect). */
  openCalls() {
    return [...this.cards.values()].filter((card) => !card.closed).map((card) => card.call.call_id);
  }
}
