// @ts-check
// One card in the feed for one tool call: it answers exactly once, or is dismissed with a reason.

import { h, uid } from "../dom.js";

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

export const STATUS_TEXT = {
  completed: "Done",
  rejected: "Rejected",
  cancelled: "Cancelled",
  expired: "Expired",
  unsupported: "Not supported by this App",
  failed: "Failed",
};

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
    return this.result !== null || this.dismissed;
  }

  /** Add the card's question as its heading (and accessible name). */
  heading(text) {
    const id = uid("card-q");
    this.body.append(h("h2", { class: "card-question", id }, text));
    this.el.setAttribute("aria-labelledby", id);
  }

  /**
   * Send the one tool.result of this call; later answers are ignored. `summary` is shown on the
   * card ("" shows nothing, undefined a generic text for the status). Returns whether it was sent.
   */
  answer(status, result, summary) {
    if (this.closed) return false;
    const { call_id, name, action } = this.call;
    this.result = { call_id, name, action: action ?? undefined, status, result };
    this.send("tool.result", this.result);
    this.settle(status, summary === undefined ? STATUS_TEXT[status] ?? status : summary);
    return true;
  }

  /** The agent withdrew the call (answered on another device, expired, ...): grey it out, show why. */
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
