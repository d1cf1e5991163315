// @ts-check
// Canvas boards: SVG drawings the agent opens, draws on, undoes, clears and closes.

import { svg } from "./dom.js";

const PATH_DATA = /^\s*[Mm][\sMmLlHhVvCcSsQqTtAaZz0-9eE.,+-]*$/;
const MAX_SIDE = 10_000;

/** One board: an <svg> with a viewBox of the requested size, scaled to fit the card. */
export class Board {
  constructor(id, width, height) {
    this.id = id;
    this.svg = svg("svg", {
      class: "board",
      viewBox: `0 0 ${width} ${height}`,
      width,
      height,
      role: "img",
      "aria-label": `Canvas ${width} × ${height}`,
    });
  }

  /** Add a stroke; returns how many strokes the board has. */
  draw(d, color, width) {
    this.svg.append(
      svg("path", {
        d,
        fill: "none",
        stroke: color,
        "stroke-width": width,
        "stroke-linecap": "round",
        "stroke-linejoin": "round",
      }),
    );
    return this.strokes;
  }

  /** Remove the last stroke; returns whether there was one. */
  undo() {
    const last = this.svg.lastElementChild;
    last?.remove();
    return Boolean(last);
  }

  clear() {
    this.svg.replaceChildren();
  }

  get strokes() {
    return this.svg.childElementCount;
  }
}

/** Every open board by instance id. Methods throw Error with a message meant for the agent. */
export class Boards {
  constructor() {
    this.open = new Map();
  }

  create(id, width, height) {
    for (const [name, side] of [["width", width], ["height", height]]) {
      if (!Number.isInteger(side) || side < 1 || side > MAX_SIDE) {
        throw new Error(`${name} must be a whole number from 1 to ${MAX_SIDE}`);
      }
    }
    const board = this.open.get(id) ?? new Board(id, width, height);
    this.open.set(id, board);
    return board;
  }

  get(id) {
    const board = this.open.get(id);
    if (!board) throw new Error(`unknown canvas instance_id "${id}"; open a canvas first`);
    return board;
  }

  draw(id, { path, color = "#111111", width = 2 }) {
    const board = this.get(id);
    if (typeof path !== "string" || !PATH_DATA.test(path)) throw new Error("path must be SVG path data such as 'M10 10 L50 50'");
    if (typeof color !== "string" || !CSS.supports("color", color)) throw new Error(`color ${JSON.stringify(color)} is not a CSS colour`);
    if (typeof width !== "number" || !(width > 0)) throw new Error("width must be a positive number");
    return board.draw(path, color, width);
  }

  close(id) {
    const board = this.get(id);
    this.open.delete(id);
    return board;
  }
}
