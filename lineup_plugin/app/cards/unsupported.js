// @ts-check
// Any tool this App has no renderer for is answered "unsupported" at once, never left waiting.

import { h } from "../dom.js";

export const unsupported = {
  label: "Unsupported",
  interactive: false,
  render(card) {
    const { name } = card.call;
    card.body.append(h("p", {}, `The agent asked for "${name}", which this App cannot show.`));
    card.answer("unsupported", { message: `this App has no renderer for tool "${name}"` }, "Told the agent");
  },
};
