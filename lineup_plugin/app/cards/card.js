// @ts-check
// One card in the feed for one tool call: it answers exactly once, or is dismissed with a reason;
// an answer given here reads "Sending…" (or "Not sent yet" while offline) until the agent's
// verdict says how the call ended (see outcome.js).

import { h, uid } from "../dom.js";
import { verdictText } from "./outcome.js";


/** How the card names the agent session that asks (tool.call `origin`), e.g. "CLI · hermes". */
const ORIGIN_TEXT = {
  cli: "CLI",
  chat: "One-shot chat",
  gateway: "Gateway chat",
  cron: "Cron job",
  subagent: "Subagent",
  mcp: "MCP client",
  process: "Agent process",
};

export function originText(origin) {
  if (!origin || typeof origin !== "object") return "";
  const kind = ORIGIN_TEXT[origin.kind] ?? "Agent";
  return typeof origin.label === "string" && origin.label ? `${kind} · ${origin.label}` : kind;
}

export class Card {
  /**
   * `send(kind, payload)` sends an envelope to the agent; `label` names the tool for people;
   * an `interactive` card waits for the user, the others are answered by the App at once.
   */
  constructor(call, send, { label, interactive }) {
    this.call = call;
    this.send = send;
    this.interactive = interactive;
    this.result = null;
    this.dismissed = false;
    this.restored = false; // drawn from the history: nothing is sent
    /** @type {import("./outcome.js").Outcome | null} the agent's verdict, once it is known */
    this.verdict = null;
    this.online = true;
    this.body = h("fieldset", { class: "card-body" });
    this.outcome = h("p", { class: "card-outcome", role: "status", hidden: true });
    this.tag = h("span", { class: "card-tag" }, label);
    this.el = h(
      "article",
      { class: "card", tabindex: "-1", "data-call-id": call.call_id, "data-tool": call.name, "data-state": "waiting" },
      h(
        "header",
        { class: "card-head" },
        this.tag,
        call.origin ? h("span", { class: "card-origin", title: "Which agent session asks" }, originText(call.origin)) : null,
      ),
      this.body,
      this.outcome,
    );
  }

  /** Take a renderer's label and whether it waits for the user (a plugin's is known once loaded). */
  use({ label, interactive }) {
    this.tag.textContent = label;
    this.interactive = interactive;
  }

  /** Whether the card takes no more answers (answered here, or dismissed). */
  get closed() {
    return this.result !== null || this.dismissed || this.verdict !== null;
  }

  /** Add the card's question as its heading (and accessible name). */
  heading(text) {
    const id = uid("card-q");
    this.body.append(h("h2", { class: "card-question", id }, text));
    this.el.setAttribute("aria-labelledby", id);
  }

  /**
   * Send the one tool.result of this call; later answers are ignored. `summary` (what the user
   * chose, e.g. "You chose: staging") is shown with "Sending…" until the agent's verdict replaces
   * it. Returns whether it was sent.
   */
  answer(status, result, summary) {
    if (this.closed) return false;
    const { call_id, name, action } = this.call;
    this.result = { call_id, name, action: action ?? undefined, status, result };
    this.summary = summary || "";
    this.send("tool.result", this.result);
    this.pending();
    return true;
  }

  /** This device's answer `result` (a tool.result payload), shown again after a reload: it waits for the verdict. */
  answered(result) {
    if (this.closed) return;
    this.result = result;
    this.summary = "";
    this.pending();
  }

  /** Whether the card was answered here and waits for the agent's verdict. */
  get sending() {
    return this.result !== null && this.verdict === null && !this.dismissed;
  }

  /** The link to the agent is up (`online`) or not: a card waiting for its verdict says whether its answer can go. */
  link(online) {
    this.online = online;
    if (this.sending) this.pending();
  }

  pending() {
    const wait = this.online ? "Sending…" : "Not sent yet: it goes when the App is connected again";
    this.settle("sending", this.summary ? `${this.summary} — ${wait}` : wait);
  }

  /**
   * The agent's verdict: how the call ended (the answer that won and where, or why not), shown
   * on the card whoever answered — here, elsewhere, or nobody.
   * @param {import("./outcome.js").Outcome} outcome
   * @param {ReadonlySet<string>} ownIds the ids the agent knows this device by
   */
  conclude(outcome, ownIds) {
    if (this.verdict) return;
    this.verdict = outcome;
    // a card the App answers by itself (a canvas board, the calculator) gives the same answer on
    // every device: whichever device's answer won, it was not a person's choice that lost
    const answeredHere = this.result !== null && this.interactive;
    const { text, applied } = verdictText(outcome, ownIds, this.call.arguments ?? {}, answeredHere, this.summary);
    if (!applied && this.interactive) this.el.classList.add("dismissed");
    this.settle(answeredHere && !applied ? "not-applied" : outcome.status, text);
    if (outcome.status === "completed" && outcome.result && "selected" in outcome.result) {
      for (const button of this.el.querySelectorAll("button")) {
        button.classList.toggle("chosen", button.textContent === String(outcome.result.selected));
      }
    }
  }

  /** The agent withdrew the call without saying how it ended (an older agent): grey it out, show why. */
  dismiss(reason) {
    if (this.closed) return;
    this.dismissed = true;
    this.el.classList.add("dismissed");
    this.settle("dismissed", reason || "Withdrawn by the agent");
  }

  /** Append a remark under the card, e.g. the agent refused our answer. */
  note(text) {
    this.el.append(h("p", { class: "card-note", role: "status" }, text));
  }

  settle(state, text) {
    const hadFocus = this.el.contains(document.activeElement);
    this.body.disabled = true;
    this.el.dataset.state = state;
    this.outcome.textContent = text;
    this.outcome.hidden = !text;
    if (hadFocus) this.el.focus();
  }
}
