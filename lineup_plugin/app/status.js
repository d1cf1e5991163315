// @ts-check
// The status view: the agent's metering (GET /api/stats) per tool and status, and per device:
// calls, answer time p50/p95, error rate — what `lineup stats` prints, for the App's user.

import { h } from "./dom.js";
import { deviceId } from "./envelope.js";

/** The periods to show: seconds back from now ("" = everything the agent keeps). */
const SINCE = [
  ["", "Everything kept"],
  ["3600", "Last hour"],
  ["86400", "Last 24 hours"],
  ["604800", "Last 7 days"],
];

const seconds = (value) => (value === null || value === undefined ? "–" : `${value.toFixed(1)} s`);
const times = (one) => `${seconds(one.p50)} / ${seconds(one.p95)}`;
const percent = (value) => `${(value * 100).toFixed(1)} %`;

/**
 * A device as people read it: this one, its name ("Pixel 7 (Chrome)", once it answered a call the
 * agent keeps), else its id shortened; the whole id on hover.
 * @param {string} id
 * @param {string | null | undefined} name
 */
function device(id, name) {
  if (id === deviceId()) return h("span", { title: id }, "This device");
  if (typeof name === "string" && name) return h("span", { title: id }, name);
  return h("span", { title: id }, id.length > 16 ? `${id.slice(0, 14)}…` : id);
}

function table(caption, head, rows) {
  return h(
    "table",
    { class: "stats-table" },
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, head.map((text) => h("th", { scope: "col" }, text)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((text, i) => h(i ? "td" : "th", i ? {} : { scope: "row" }, text))))),
  );
}

/** One row per status; `name()` makes the first cell of each (a node belongs to one row only). */
function statusRows(name, statuses) {
  return Object.entries(statuses).map(([status, one]) => [name(), status, String(one.count), times(one)]);
}

/** The figures of one /api/stats answer as elements. */
export function renderStats(data) {
  const parts = [h("p", { class: "stats-summary" }, `${data.calls} call${data.calls === 1 ? "" : "s"}`
    + (data.first_record ? `; the agent's log goes back to ${new Date(data.first_record).toLocaleString()}` : ""))];
  if (!data.calls) return parts;
  const tools = Object.entries(data.tools);
  const head = ["Status", "Calls", "p50 / p95"];
  parts.push(table("By tool", ["Tool", ...head], tools.flatMap(([name, tool]) => statusRows(() => name, tool.statuses))));
  parts.push(table("Error rate (failed or unsupported)", ["Tool", "Calls", "Error rate"],
    tools.map(([name, tool]) => [name, String(tool.calls), percent(tool.error_rate)])));
  const devices = Object.entries(data.devices);
  if (devices.length) {
    parts.push(table("By device", ["Device", ...head], devices.flatMap(([id, one]) => [
      [device(id, one.name), "cards received", String(one.delivered), ""],
      ...statusRows(() => device(id, one.name), one.statuses),
    ])));
  }
  return parts;
}

export class StatusView {
  /** `dialog` is the view's <dialog>; `api()` gives the agent's API (or null where there is none). */
  constructor(dialog, api) {
    this.dialog = dialog;
    this.api = api;
    this.since = h("select", { id: "stats-since" }, SINCE.map(([value, text]) => h("option", { value }, text)));
    this.content = h("div", { class: "stats-content", role: "status", "aria-live": "polite", tabindex: "0" }); // it may scroll
    const close = h("button", { type: "button", class: "secondary" }, "Close");
    const refresh = h("button", { type: "button", class: "primary" }, "Refresh");
    dialog.append(
      h("h2", { id: "stats-title" }, "Tool usage"),
      h("div", { class: "field" }, h("label", { for: "stats-since" }, "Period"), this.since),
      this.content,
      h("div", { class: "actions" }, refresh, close),
    );
    close.addEventListener("click", () => dialog.close());
    refresh.addEventListener("click", () => this.load());
    this.since.addEventListener("change", () => this.load());
  }

  open() {
    this.dialog.showModal();
    return this.load();
  }

  async load() {
    const get = this.api();
    if (!get) {
      this.content.replaceChildren(h("p", {}, "Usage figures are shown when the App is opened from the agent's own address."));
      return;
    }
    const span = Number(this.since.value);
    const query = span ? `?since=${Date.now() / 1000 - span}` : "";
    this.content.replaceChildren(h("p", {}, "Loading…"));
    try {
      this.content.replaceChildren(...renderStats(await get(`/api/stats${query}`)));
    } catch (error) {
      this.content.replaceChildren(h("p", { class: "error" }, `The agent could not give its figures: ${error.message}`));
    }
  }
}
