// @ts-check
// choice: a question and one button per option → completed {selected, index}.

import { h } from "../dom.js";

export const choice = {
  label: "Choice",
  interactive: true,
  render(card, args) {
    card.heading(String(args.question ?? "Choose one"));
    const options = Array.isArray(args.options) ? args.options.map(String) : [];
    const group = h("div", { class: "options" });
    options.forEach((option, index) => {
      const button = h("button", { type: "button", class: "option" }, option);
      button.addEventListener("click", () => {
        if (card.answer("completed", { selected: option, index }, `You chose: ${option}`)) {
          button.classList.add("chosen");
        }
      });
      group.append(button);
    });
    card.body.append(group);
  },
};
