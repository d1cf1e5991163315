// @ts-check
// calculator: computed right here and answered at once → completed {value}.

import { h } from "../dom.js";

const OPERATIONS = {
  add: ["+", (a, b) => a + b],
  subtract: ["−", (a, b) => a - b],
  multiply: ["×", (a, b) => a * b],
  divide: ["÷", (a, b) => a / b],
};

export const calculator = {
  label: "Calculator",
  interactive: false,
  render(card, args) {
    const action = card.call.action;
    const operation = OPERATIONS[action];
    if (!operation) {
      card.answer("unsupported", { message: `the calculator has no action "${action}"` });
      return;
    }
    const { a, b } = args;
    if (typeof a !== "number" || typeof b !== "number") {
      card.answer("failed", { message: "a and b must be numbers" });
      return;
    }
    const [symbol, compute] = operation;
    const line = h("p", { class: "calc" }, `${a} ${symbol} ${b} = `);
    card.body.append(line);
    if (action === "divide" && b === 0) {
      line.append("—");
      card.answer("failed", { message: "division by zero" }, "Division by zero");
      return;
    }
    const value = compute(a, b);
    if (!Number.isFinite(value)) {
      card.answer("failed", { message: "the result is not a finite number" });
      return;
    }
    line.append(h("output", {}, String(value)));
    card.answer("completed", { value }, "");
  },
};
