// @ts-check
// confirm: message, details and risk → Approve: completed {approved: true}; Reject: rejected {approved: false}.

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
    const reject = h("button", { type: "button", class: "secondary" }, "Reject");
    const approve = h("button", { type: "button", class: high ? "danger" : "primary" }, "Approve");
    reject.addEventListener("click", () => card.answer("rejected", { approved: false }, "You rejected this."));
    approve.addEventListener("click", () => card.answer("completed", { approved: true }, "You approved this."));
    card.body.append(h("div", { class: "actions" }, reject, approve));
  },
};
