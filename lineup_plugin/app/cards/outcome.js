// @ts-check
// How a call's outcome reads on its card. The outcome is the agent's verdict — the answer that won
// and the device that gave it, or how the call ended without one — sent to every device (tool.cancel
// `outcome`, the history's call.end), never this device's own guess: a card answered here reads
// "Sending…" until the verdict arrives, then "Approved on this device", or why this answer was not
// applied ("Not applied: already answered on Pixel 7: Approved").

/** @typedef {{status: string, result?: Record<string, any>, device_id?: string | null, device_name?: string | null}} Outcome */

export const STATUS_TEXT = {
  completed: "Done",
  rejected: "Rejected",
  cancelled: "Cancelled",
  expired: "Expired",
  unsupported: "Not supported by this App",
  failed: "Failed",
};

/** This browser as people name it ("Pixel 7 (Chrome)", "iPhone (Safari)"): what device.hello says as `name`. */
export function deviceName(userAgent = globalThis.navigator?.userAgent ?? "") {
  const android = /Android [\d.]+; ([^;)]+?)(?: Build\/[^;)]*)?[;)]/.exec(userAgent);
  let device = "Computer";
  if (android) device = android[1].trim().length > 1 ? android[1].trim() : "Android phone"; // "K": a reduced user agent
  else if (/iPhone/.test(userAgent)) device = "iPhone";
  else if (/iPad/.test(userAgent)) device = "iPad";
  else if (/CrOS/.test(userAgent)) device = "Chromebook";
  else if (/Macintosh/.test(userAgent)) device = "Mac";
  else if (/Windows/.test(userAgent)) device = "Windows PC";
  else if (/Linux/.test(userAgent)) device = "Linux PC";
  const browser = /Edg\//.test(userAgent)
    ? "Edge"
    : /Firefox\//.test(userAgent)
      ? "Firefox"
      : /Chrom(e|ium)\//.test(userAgent)
        ? "Chrome"
        : /Safari\//.test(userAgent)
          ? "Safari"
          : "";
  return browser ? `${device} (${browser})` : device;
}

/**
 * What a call's result says, for people: "Approved", "Allow for this session", "Chose: staging",
 * "Sent name: "Ada"", "Rejected", "Expired: no answer in time", "Answered in the terminal: Deny"...
 * @param {{status: string, result?: Record<string, any>}} result
 * @param {Record<string, any>} [args] the call's arguments (the labels of a confirm's choices)
 */
export function resultText(result, args = {}) {
  const answer = result.result && typeof result.result === "object" ? result.result : {};
  const choices = Array.isArray(args.choices) ? args.choices : [];
  const chosen = typeof answer.choice === "string" ? choices.find((c) => c?.value === answer.choice) : undefined;
  if (chosen && (result.status === "completed" || result.status === "rejected")) return String(chosen.label);
  let text = STATUS_TEXT[result.status] ?? String(result.status);
  if (result.status === "completed") {
    if ("selected" in answer) text = `Chose: ${answer.selected}`;
    else if (answer.approved === true) text = "Approved";
    else if (answer.values && typeof answer.values === "object") {
      const parts = Object.entries(answer.values).map(([key, value]) => `${key}: ${JSON.stringify(value)}`);
      text = parts.length ? `Sent ${parts.join(", ")}` : "Sent";
    } else if ("value" in answer) text = `Result: ${answer.value}`;
  } else if (typeof answer.message === "string" && answer.message) {
    // a card withdrawn because the question was answered elsewhere ("answered in the terminal: Allow
    // once", from the agent's own prompt) reads as that answer, not as "Cancelled"
    const elsewhere = result.status === "cancelled" && answer.message.startsWith("answered ");
    text = elsewhere ? answer.message[0].toUpperCase() + answer.message.slice(1) : `${text}: ${answer.message}`;
  }
  return text;
}

/**
 * Where the winning answer was given, for people: "this device", the other device's name, or ""
 * when nobody answered (the call expired, was stopped...).
 * @param {Outcome} outcome
 * @param {ReadonlySet<string>} ownIds the ids the agent knows this device by (its own, a relay pairing's)
 */
export function answeredOn(outcome, ownIds) {
  if (!outcome.device_id) return "";
  if (ownIds.has(outcome.device_id)) return "this device";
  return typeof outcome.device_name === "string" && outcome.device_name ? outcome.device_name : "another device";
}

/**
 * The text of a card once the agent's verdict is known, and whether this device's answer (if it
 * gave one: `answeredHere`) is the one that was applied.
 * @param {Outcome} outcome
 * @param {ReadonlySet<string>} ownIds the ids the agent knows this device by
 * @param {Record<string, any>} args the call's arguments
 * @param {boolean} answeredHere
 * @param {string} [summary] what the card said of the answer given here ("You gave 4 of 5 stars"): a
 *   plugin's result has no text of its own, so an applied answer reads as its card put it
 * @returns {{text: string, applied: boolean}}
 */
export function verdictText(outcome, ownIds, args, answeredHere, summary = "") {
  let what = resultText(outcome, args);
  const where = answeredOn(outcome, ownIds);
  if (answeredHere && where === "this device" && summary && what === STATUS_TEXT.completed) what = summary; // "Done"
  if (answeredHere && where !== "this device") {
    const why = where ? `already answered on ${where}: ${what}` : `the call had ended: ${what}`;
    return { text: `Not applied: ${why}`, applied: false };
  }
  return { text: where ? `${what} on ${where}` : what, applied: answeredHere };
}
