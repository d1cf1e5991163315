// The App renderer of the `rating` tool: five star buttons → completed {stars}; "Skip" → rejected.
//
// A renderer module's default export is {label, interactive, render(card, args, context)}, the same
// shape as the App's own cards (see LineUp's docs/plugins.md, "Renderers for plugin tools"). Build the card
// with context.h (text always goes through textContent) and answer with card.answer(...), once.

export default {
  label: "Rating",
  interactive: true,
  render(card, args, { h }) {
    const subject = typeof args.subject === "string" && args.subject ? args.subject : "this";
    card.heading(`How would you rate ${subject}?`);
    const stars = h("div", { class: "options", role: "group", "aria-label": "Stars" });
    for (let count = 1; count <= 5; count += 1) {
      const button = h("button", { type: "button", class: "option", "aria-label": `${count} of 5 stars` }, "★".repeat(count));
      button.addEventListener("click", () => {
        if (card.answer("completed", { stars: count }, `You gave ${count} of 5 stars`)) button.classList.add("chosen");
      });
      stars.append(button);
    }
    const skip = h("button", { type: "button", class: "secondary" }, "Skip");
    skip.addEventListener("click", () => card.answer("rejected", { message: "the user did not want to rate" }, "Skipped"));
    card.body.append(stars, h("div", { class: "actions" }, skip));
  },
};
