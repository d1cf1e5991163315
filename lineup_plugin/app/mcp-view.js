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
// An answer on the phone ends the MCP call; the host then sends its result and this card is dismissed,
// as on a second device. An answer here ends the call on the phone the same way.

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

/** What a card says when its call ended elsewhere, from the MCP result LineUp gave. */
function endReason(result) {
  let ended;
  try {
    ended = JSON.parse(resultText(result));
  } catch {
    return "Ended";
  }
  if (ended?.status === "completed") return "Answered on another device";
  const message = ended?.result?.message;
  return message ? `${ended.status}: ${message}` : String(ended?.status ?? "Ended");
}

const bridge = new HostBridge(window.parent);
const feed = document.getElementById("feed");
let card = null; // the card of this call, once the server said which LineUp call it is
let ended = null; // the call's MCP result, if it came before the card
let request = undefined; // the id of the host's tools/call this card stands for (hostContext.toolInfo.id)

const deck = new Deck({ show: (el) => feed.append(el), send: (kind, payload) => send(kind, payload), boards: new Boards() });
deck.plugins = { find: async (name) => (name === VIEW.tool && pluginRenderer ? checked({ default: pluginRenderer }) : null) };

/** The card's answer goes to the agent through the host; acknowledgements mean nothing to a host. */
async function send(kind, payload) {
  // Tools the App answers by itself (calculator, canvas) are answered by the phone's App, not here.
  if (kind !== "tool.result" || !card?.interactive) return;
  const { call_id, status, result } = payload;
  try {
    const answer = await bridge.request("tools/call", { name: "lineup_answer", arguments: { call_id, status, result } });
    if (answer?.isError) card.note(`The agent did not take this answer: ${resultText(answer)}`);
  } catch (error) {
    card.note(`The host could not pass the answer on: ${error.message}`);
  }
}

function notice(text) {
  feed.replaceChildren(h("p", { class: "msg msg-system" }, text));
}

/** The call ended (answered on the phone, expired, cancelled...): dismiss the card if it still waits. */
function end(reason) {
  if (card) deck.cancel({ call_id: card.call.call_id, reason });
  else if (!feed.firstChild || feed.firstChild.matches?.("p")) notice(reason);
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
    notice(ended ? endReason(ended) : `Answer this on your LineUp App. (${resultText(found) || "no card here"})`);
    return;
  }
  feed.replaceChildren();
  deck.call(call);
  card = deck.cards.get(call.call_id) ?? null;
  if (ended) end(endReason(ended));
});
bridge.on("ui/notifications/tool-result", (result) => {
  ended = result;
  end(endReason(result));
});
bridge.on("ui/notifications/tool-cancelled", ({ reason }) => {
  ended = { content: [{ type: "text", text: JSON.stringify({ status: "cancelled", result: { message: reason || "the host cancelled the call" } }) }] };
  end(endReason(ended));
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
