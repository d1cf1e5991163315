// @ts-check
// input: a form from arguments.fields (a JSON Schema object), or one text answer → completed {values}.

import { h } from "../dom.js";
import { buildForm } from "../form.js";

function summarize(values) {
  const parts = Object.entries(values).map(([key, value]) => `${key}: ${JSON.stringify(value)}`);
  return parts.length ? `Sent ${parts.join(", ")}` : "Sent";
}

export const input = {
  label: "Form",
  interactive: true,
  render(card, args) {
    card.heading(String(args.prompt ?? "Please fill in"));
    const form = buildForm(args.fields);
    const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
    const submit = h("button", { type: "submit", class: "primary" }, "Send");
    form.el.append(h("div", { class: "actions" }, cancel, submit));
    form.el.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = form.read();
      if (values) card.answer("completed", { values }, summarize(values));
    });
    cancel.addEventListener("click", () => card.answer("cancelled", { message: "the user cancelled the form" }));
    card.body.append(form.el);
  },
};
