// @ts-check
// confirm: message, details and risk → Approve: completed {approved: true}; Reject: rejected {approved: false}.
// With choices ([{value, label, approves}], e.g. Hermes' allow once / this session / always / deny) a
// button each, in order: one that approves → completed {approved: true, choice}; else rejected
// {approved: false, choice}.

import { h } from "../dom.js";

const RISK_LABEL = {
  display_only: "Low risk",
  user_confirmation: "Needs your approval",
  system_permission: "High risk: system permission",
  restricted: "High risk: restricted action",
};
const HIGH_RISK = new Set(["system_permission", "restricted"]);

export const confirm = {
  label: "Confirm",
  interactive: true,
  render(card, args) {
    const risk = typeof args.risk === "string" ? args.risk : card.call.risk;
    const high = HIGH_RISK.has(risk);
    card.el.classList.toggle("high-risk", high);
    card.heading(String(args.message ?? "Do you approve?"));
    if (risk) {
      card.body.append(h("p", { class: `risk${high ? " risk-high" : ""}`, "data-risk": risk }, RISK_LABEL[risk] ?? risk));
    }
    if (args.details) card.body.append(h("pre", { class: "details" }, String(args.details)));
    if (Array.isArray(args.choices) && args.choices.length) {
      const buttons = args.choices.map((choice) => {
        const approves = choice.approves === true;
        const label = String(choice.label);
        const kind = approves ? (high ? "danger" : "primary") : "secondary";
        const button = h("button", { type: "button", class: kind, "data-choice": String(choice.value) }, label);
        const answer = { approved: approves, choice: String(choice.value) };
        button.addEventListener("click", () =>
          card.answer(approves ? "completed" : "rejected", answer, `You chose: ${label}`),
        );
        return button;
      });
      card.body.append(h("div", { class: "actions choices" }, ...buttons));
      return;
    }
    const reject = h("button", { type: "button", class: "secondary" }, "Reject");
    const approve = h("button", { type: "button", class: high ? "danger" : "primary" }, "Approve");
    reject.addEventListener("click", () => card.answer("rejected", { approved: false }, "You rejected this."));
    approve.addEventListener("click", () => card.answer("completed", { approved: true }, "You approved this."));
    card.body.append(h("div", { class: "actions" }, reject, approve));
  },
};
