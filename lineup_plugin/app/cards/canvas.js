// @ts-check
// canvas: "open" shows a board card; draw / undo / clear / close change that board and answer at once.

import { h } from "../dom.js";

/** Instance ids come from the open call's id, so every device showing the call names the board alike. */
const instanceFor = (callId) => `canvas-${callId}`;

export const canvas = {
  label: "Canvas",
  interactive: false,
  visible: (call) => call.action === "open",
  render(card, args, { boards }) {
    const action = card.call.action;
    let result;
    try {
      if (action === "open") {
        const id = instanceFor(card.call.call_id);
        const board = boards.create(id, args.width, args.height);
        board.card = card;
        card.body.append(h("div", { class: "board-frame" }, board.svg));
        result = { instance_id: id, message: `instance_id: ${id}` };
      } else if (action === "draw") {
        const strokes = boards.draw(args.instance_id, args);
        result = { instance_id: args.instance_id, strokes, message: `drawn; ${strokes} stroke(s) on the canvas` };
      } else if (action === "undo") {
        const undone = boards.get(args.instance_id).undo();
        result = { instance_id: args.instance_id, message: undone ? "undid the last stroke" : "nothing to undo" };
      } else if (action === "clear") {
        boards.get(args.instance_id).clear();
        result = { instance_id: args.instance_id, message: "cleared" };
      } else if (action === "close") {
        const board = boards.close(args.instance_id);
        board.card?.note("Canvas closed");
        board.card?.el.classList.add("closed");
        result = { instance_id: args.instance_id, message: "closed" };
      } else {
        card.answer("unsupported", { message: `the canvas has no action "${action}"` });
        return;
      }
    } catch (error) {
      card.answer("failed", { message: error.message });
      return;
    }
    card.answer("completed", result, "");
  },
};
