// @ts-check
// A small finite-state machine: the states something can be in and the moves allowed between them.
// The App's connections (connection.js, relay.js, transport.js) are in exactly one named state
// each, instead of a handful of booleans that could contradict each other.

/** @template {string} S */
export class StateMachine {
  /**
   * @param {string} name what is in these states (named in the error of a move not allowed)
   * @param {Readonly<Record<S, readonly S[]>>} moves each state → the states it may move to
   * @param {S} initial
   * @param {(state: S, from: S) => void} [onChange] called after every move to another state
   */
  constructor(name, moves, initial, onChange) {
    this.name = name;
    this.moves = moves;
    /** @type {S} */
    this.state = initial;
    this.onChange = onChange;
  }

  /** Whether the machine is in one of `states`. */
  is(/** @type {S[]} */ ...states) {
    return states.includes(this.state);
  }

  /**
   * Move to `to` (staying in the same state is no move). A move the table does not allow is a bug
   * of the App, not bad input: it throws.
   * @param {S} to
   */
  go(to) {
    const from = this.state;
    if (to === from) return;
    if (!this.moves[from].includes(to)) throw new Error(`${this.name}: no move from ${from} to ${to}`);
    this.state = to;
    this.onChange?.(to, from);
  }
}
