// @ts-check
// The card an MCP Apps host (SEP-1865: Claude, ChatGPT, VS Code, Goose...) shows inline while the
// agent's LineUp tool call waits. `lineup mcp` bundles this module with the App's own cards into one
// page per tool (ui://lineup/card/<tool>); the host runs it in a sandboxed iframe and talks to it with
// JSON-RPC over postMessage:
//
//   view → host  ui/initialize, then ui/notifications/initialized, ui/notifications/size-changed (the
//                content's size, not the frame's);
//                tools/call lineup_card  (which LineUp call this is: its tool.call, found by the server
//                from the host's toolInfo.id, the id of the tools/call request this card stands for)
//                tools/call lineup_answer (the user's answer: the first answer wins, on any surface)
//   host → view  ui/notifications/tool-input (the call's arguments), ui/notifications/tool-result (the
//                call ended: answered here or on the phone, expired...), ui/notifications/tool-cancelled,
//                ui/resource-teardown, ping
//
// An answer on the phone ends the MCP call; the host then sends its result and this card shows it
// ("Approved on another device"), as on a second device. An answer here reads "Sending…" until the
// call's result says how it ended: applied here, or "Not applied: already answered on another device".

import { Boards } from "./canvas.js";
import { Deck } from "./cards/deck.js";
import { checked } from "./cards/plugins.js";
import { h } from "./dom.js";
import pluginRenderer from "./plugin-renderer.js";

const PROTOCOL_VERSION = "2026-01-26";
const VIEW = JSON.parse(document.getElementById("lineup-view").textContent);

/** JSON-RPC 2.0 over postMessage with the host window (requests both ways, notifications). */
class HostBridge {
  constructor(host) {
    this.host = host;
    this.nextId = 1;
    this.waiting = new Map();
    this.handlers = new Map();
    addEventListener("message", (event) => this.receive(event));
  }

  post(message) {
    this.host.postMessage({ jsonrpc: "2.0", ...message }, "*");
  }

  request(method, params) {
    const id = this.nextId++;
    this.post({ id, method, params });
    return new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject }));
  }

  notify(method, params) {
    this.post({ method, params });
  }

  /** `handler(params)` answers the host's request `method` (its return value) or takes its notification. */
  on(method, handler) {
    this.handlers.set(method, handler);
  }

  receive(event) {
    const message = event.data;
    if (event.source !== this.host || !message || message.jsonrpc !== "2.0") return;
    if (message.method === undefined) {
      const waiter = this.waiting.get(message.id);
      this.waiting.delete(message.id);
      if (message.error) waiter?.reject(new Error(message.error.message || "the host refused the request"));
      else waiter?.resolve(message.result);
      return;
    }
    const handler = this.handlers.get(message.method);
    if (message.id === undefined) {
      handler?.(message.params ?? {});
      return;
    }
    Promise.resolve()
      .then(() => {
        if (!handler) throw Object.assign(new Error(`method not found: ${message.method}`), { code: -32601 });
        return handler(message.params ?? {});
      })
      .then(
        (result) => this.post({ id: message.id, result: result ?? {} }),
        (error) => this.post({ id: message.id, error: { code: error.code ?? -32000, message: error.message } }),
      );
  }
}

/** The text of an MCP tool result (LineUp puts its JSON there). */
function resultText(result) {
  return (result?.content ?? []).filter((block) => block?.type === "text").map((block) => block.text).join("\n");
}

/** How the call ended, from the MCP result LineUp gave (its JSON: status, result), or null if unreadable. */
function endOf(result) {
  try {
    const ended = JSON.parse(resultText(result));
    return ended && typeof ended.status === "string" ? ended : null;
  } catch {
    return null;
  }
}

/** This card's place among the devices: the outcome of an answer given here names it. */
const HERE = "mcp-host";

const bridge = new HostBridge(window.parent);
const feed = document.getElementById("feed");
let card = null; // the card of this call, once the server said which LineUp call it is
let ended = null; // the call's MCP result, if it came before the card
/** whether the answer given here was applied (true), refused (false), or not known yet (null) */
let applied = null;
let request = undefined; // the id of the host's tools/call this card stands for (hostContext.toolInfo.id)

const deck = new Deck({ show: (el) => feed.append(el), send: (kind, payload) => send(kind, payload), boards: new Boards(), ownId: HERE });
deck.plugins = /** @type {any} */ ({ find: async (name) => (name === VIEW.tool && pluginRenderer ? checked({ default: pluginRenderer }) : null) });

/** The card's answer goes to the agent through the host; acknowledgements mean nothing to a host. */
async function send(kind, payload) {
  // Tools the App answers by itself (calculator, canvas) are answered by the phone's App, not here.
  if (kind !== "tool.result" || !card?.interactive) return;
  const { call_id, status, result } = payload;
  try {
    const answer = await bridge.request("tools/call", { name: "lineup_answer", arguments: { call_id, status, result } });
    applied = !answer?.isError; // refused: the call had ended (its result, the verdict, says how)
  } catch (error) {
    card.note(`The host could not pass the answer on: ${error.message}`);
    applied = false;
  }
  conclude();
}

/**
 * Show the agent's verdict once it is known: the call's MCP result (the answer that won), and —
 * for an answer given here — whether it was this one. Never this card's own guess.
 */
function conclude() {
  if (!card || !ended) return;
  const end = endOf(ended);
  if (!end) return deck.cancel({ call_id: card.call.call_id, reason: "Ended" });
  const answeredHere = card.result !== null;
  if (answeredHere && applied === null) return; // the answer's own reply says whether it won
  const answered = end.status === "completed" || end.status === "rejected";
  const device_id = answeredHere && applied ? HERE : answered ? "elsewhere" : null;
  deck.cancel({ call_id: card.call.call_id, outcome: { status: end.status, result: end.result ?? {}, device_id } });
}

function notice(text) {
  feed.replaceChildren(h("p", { class: "msg msg-system" }, text));
}

/** The call ended (answered here or on the phone, expired, cancelled...): its card shows how. */
function end() {
  if (card) conclude();
  else if (!feed.firstChild || (feed.firstChild instanceof Element && feed.firstChild.matches("p"))) notice(endNotice(ended));
}

/** What the page says when the call ended before its card was found. */
function endNotice(result) {
  const end = endOf(result);
  if (!end) return "Ended";
  const message = end.result?.message;
  return message ? `${end.status}: ${message}` : String(end.status);
}

bridge.on("ping", () => ({}));
bridge.on("ui/resource-teardown", () => ({}));
bridge.on("ui/notifications/tool-input", async ({ arguments: args }) => {
  notice(`Waiting for the ${VIEW.label} card…`);
  let found;
  try {
    const asked = { tool: VIEW.tool, arguments: args ?? {} };
    if (typeof request === "string" || typeof request === "number") asked.request_id = request;
    found = await bridge.request("tools/call", { name: "lineup_card", arguments: asked });
  } catch (error) {
    found = { isError: true, content: [{ type: "text", text: error.message }] };
  }
  const call = found?.structuredContent?.call;
  if (found?.isError || !call) {
    notice(ended ? endNotice(ended) : `Answer this on your LineUp App. (${resultText(found) || "no card here"})`);
    return;
  }
  feed.replaceChildren();
  deck.call(call);
  card = deck.cards.get(call.call_id) ?? null;
  if (ended) end();
});
bridge.on("ui/notifications/tool-result", (result) => {
  ended = result;
  end();
});
bridge.on("ui/notifications/tool-cancelled", ({ reason }) => {
  ended = { content: [{ type: "text", text: JSON.stringify({ status: "cancelled", result: { message: reason || "the host cancelled the call" } }) }] };
  end();
});

/** The handshake: the host sends the call's arguments once it is done. */
async function start() {
  const started = await bridge.request("ui/initialize", {
    appInfo: { name: "LineUp card", version: "0.1.0" },
    appCapabilities: { availableDisplayModes: ["inline"] },
    protocolVersion: PROTOCOL_VERSION,
  });
  if (started?.hostContext?.theme) document.documentElement.style.colorScheme = started.hostContext.theme;
  request = started?.hostContext?.toolInfo?.id;
  bridge.notify("ui/notifications/initialized", {});
  reportSize();
}

/** Tell the host the size of the content (as the MCP Apps SDK measures it), again whenever it changes.
 *
 * The document element is as tall as the frame the host gave it (the App's style sets html and body
 * to 100%); its height is let go to the content's for one measurement, in the next animation frame
 * (several changes: one report). The feed is watched too: html and body keep the frame's size while
 * the card in it grows. */
function reportSize() {
  let due = false;
  let last = "";
  const measure = () => {
    due = false;
    const html = document.documentElement;
    const kept = html.style.height;
    html.style.height = "max-content";
    const height = Math.ceil(html.getBoundingClientRect().height);
    html.style.height = kept;
    const width = Math.ceil(window.innerWidth);
    if (`${width}x${height}` === last) return;
    last = `${width}x${height}`;
    bridge.notify("ui/notifications/size-changed", { width, height });
  };
  const schedule = () => {
    if (!due) requestAnimationFrame(measure);
    due = true;
  };
  const observer = new ResizeObserver(schedule);
  observer.observe(document.documentElement);
  observer.observe(document.body);
  observer.observe(feed);
  schedule();
}

start().catch((error) => notice(`The host did not start this card: ${error.message}`));
