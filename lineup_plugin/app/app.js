// @ts-check
// The LineUp reference App: connect with the token, chat with the agent, answer its tool cards.

import { agentApi } from "./api.js";
import { Boards } from "./canvas.js";
import { Deck } from "./cards/deck.js";
import { Feed, showAgentStatus, showLink } from "./chat.js";
import { h } from "./dom.js";
import { Conversations, DEFAULT_CONVERSATION } from "./conversations.js";
import { Deliveries } from "./delivery.js";
import { forgetToken, loadCredentials, saveCredentials, takeTokenFromFragment } from "./credentials.js";
import { deviceId } from "./envelope.js";
import { HistoryCursor } from "./history.js";
import { CHUNK_BYTES, RELAY_CHUNK_BYTES, Uploads, readableSize } from "./files.js";
import { Notifier } from "./notify.js";
import { loadPairing, takePairingFromFragment } from "./pairing.js";
import { StatusView } from "./status.js";
import { Transport } from "./transport.js";

takeTokenFromFragment(); // first of all: the token must not stay in the address bar
let pairingProblem = "";
try {
  takePairingFromFragment();
} catch (error) {
  pairingProblem = error.message;
}

/**
 * The element of the page with id `id`, of class `type`.
 * @template {HTMLElement} T
 * @param {string} id
 * @param {{new (): T, prototype: T}} [type]
 * @returns {T}
 */
function $(id, type) {
  const el = document.getElementById(id);
  if (!(el instanceof (type ?? HTMLElement))) throw new Error(`index.html lacks #${id}`);
  return /** @type {T} */ (el);
}
const ui = {
  connectView: $("connect"),
  connectForm: $("connect-form", HTMLFormElement),
  host: $("host", HTMLInputElement),
  token: $("token", HTMLInputElement),
  connectError: $("connect-error"),
  connectButton: $("connect-button", HTMLButtonElement),
  chatView: $("chat"),
  agentName: $("agent-name"),
  link: $("link"),
  status: $("agent-status"),
  stop: $("stop", HTMLButtonElement),
  disconnect: $("disconnect"),
  feed: $("feed"),
  scroller: $("scroller"),
  composer: $("composer", HTMLFormElement),
  message: $("message", HTMLTextAreaElement),
  conversations: $("conversations"),
  photo: $("photo", HTMLInputElement),
  file: $("file", HTMLInputElement),
  tray: $("tray"),
  path: $("path"),
};
const PATHS = {
  direct: ["Direct", "Connected straight to the agent on your network"],
  relay: ["Relay", "Through the relay server, end-to-end encrypted (the agent's address cannot be reached)"],
};
const notifier = new Notifier($("notify"), $("notify-hint"), {
  send: (kind, payload) => connection.send(kind, payload, conversations.current),
  tell: (text) => feed.message("system", text),
  openCard,
});

/** the longest text the agent takes (MAX_TEXT of the protocol), in characters */
const MAX_TEXT = 100_000;
const WRONG_TOKEN = "Wrong token — check the token printed by the agent.";

const feed = new Feed(ui.feed, ui.scroller);
const boards = new Boards();
const deck = new Deck({
  show: (el) => feed.add(el),
  send: (kind, payload) => {
    // a card's answer belongs to the card's conversation, whichever is shown
    const shown = deck.cards.get(payload.call_id)?.el.dataset.conversation ?? conversations.current;
    if (kind === "tool.result") {
      notifier.settled(payload.call_id);
      cursor.remember({ k: "answer", p: payload, c: shown }); // a reload shows our answer
      cursor.save();
    }
    return connection.send(kind, payload, shown);
  },
  boards,
});
const cursor = new HistoryCursor();
const conversations = new Conversations(ui.conversations, ui.feed, {
  onSwitch: () => {
    feed.toNewest(); // a conversation opens at its newest message
    askOlder(); // all of it fits on the screen: the older ones too
  },
  actions: {
    rename: (id, title) => connection.send("conversation.update", { title }, id),
    close: (id) => connection.send("conversation.update", { closed: true }, id),
  },
});

/**
 * What is being drawn: its conversation (each element of the feed is tagged with it), its history
 * seq, and whether it counts as unread; null: what the user does here, in the current conversation.
 * @type {{conversation: string, seq?: number, counts: boolean} | null}
 */
let showing = null;
feed.onAdd = (node) => {
  const { conversation, seq, counts } = showing ?? { conversation: conversations.current, counts: false };
  conversations.place(node, conversation, { seq, counts });
};

/**
 * Draw what `show` draws in conversation `id` (of a received message or entry numbered `seq`).
 * @param {unknown} id
 * @param {() => void} show
 * @param {{seq?: unknown, counts?: boolean}} [how]
 */
function inConversation(id, show, { seq, counts = true } = {}) {
  const conversation = typeof id === "string" && id ? id : DEFAULT_CONVERSATION;
  showing = { conversation, seq: typeof seq === "number" ? seq : undefined, counts };
  try {
    show();
  } finally {
    showing = null;
  }
}

/**
 * One history entry: drawn as the live message it was, unless this App has shown it already.
 * @param {any} entry
 */
function showEntry(entry, replay = false, older = false) {
  if (!entry || typeof entry !== "object" || (!replay && !older && !cursor.fresh(entry.seq))) return;
  cursor.shown(entry.seq);
  const conversation = typeof entry.conversation_id === "string" && entry.conversation_id ? entry.conversation_id : DEFAULT_CONVERSATION;
  const at = entry.at;
  const counts = entry.event !== "text.in"; // what the user typed (on any of their devices) is read
  inConversation(conversation, () => {
    conversations.create(conversation);
    conversations.dated(conversation, at);
    const files = Array.isArray(entry.attachments) ? entry.attachments : [];
    if (entry.event === "text.in" && typeof entry.text === "string") {
      if (!deliveries.taken(entry.ref)) feed.message("user", entry.text, files, { at });
      conversations.guess(conversation, entry.text, entry.seq);
    } else if (entry.event === "text.out" && typeof entry.text === "string") {
      const { text, message_id, interrupted } = entry;
      feed.agentText({ text, message_id, interrupted: Boolean(interrupted), attachments: files }, at);
    } else if (entry.event === "call" && entry.call) {
      deck.restore(entry.call);
    } else if (entry.event === "call.end" && entry.result) {
      deck.ended(entry);
      notifier.settled(entry.result.call_id);
    } else if (entry.event === "conversation") {
      const title = typeof entry.title === "string" ? entry.title : null;
      const closed = typeof entry.closed === "boolean" ? entry.closed : null;
      conversations.update(conversation, { title, closed, seq: entry.seq });
    }
  }, { seq: entry.seq, counts });
  if (replay) return;
  cursor.remember({ e: entry });
  cursor.advance(entry.seq);
}

/** Draw again what this page showed before it was loaded (kept by the cursor); nothing is sent. */
function replay(items) {
  for (const item of items) {
    if (item?.e) showEntry(item.e, true);
    else if (item?.p && typeof item.p === "object") {
      cursor.shown(item.s);
      inConversation(item.c, () => {
        if (item.k === "text") feed.agentText({ ...item.p, text: String(item.p.text ?? "") }, item.t);
        else if (item.k === "tool.call") deck.restore(item.p);
        else if (item.k === "tool.cancel") deck.cancel(item.p);
        else if (item.k === "answer") deck.answered(item.p);
      }, { seq: item.s, counts: item.k !== "answer" });
    }
  }
}

/**
 * The older pages of the history, asked for one at a time as the user scrolls up (history.older):
 * `asking` the `before` of the request on its way (and `ref` its envelope id), `done` once the
 * beginning is shown, `ready` once this connection's catch-up has come (asked after it only),
 * `gap` the element after which the older pages of what was missed go (what was shown before).
 * @type {{asking: number | null, ref: string | null, done: boolean, ready: boolean, gap: Element | null}}
 */
const earlier = { asking: null, ref: null, done: false, ready: false, gap: null };

/** The user is near the oldest message shown: ask for the page before it, unless one is on its way. */
function askOlder() {
  if (!earlier.ready || earlier.done || earlier.asking !== null || !feed.nearTop()) return;
  const before = cursor.oldest ?? cursor.seq + 1;
  if (before <= 1) {
    olderDone(false);
    return;
  }
  earlier.asking = before;
  feed.topLine("loading");
  const payload = cursor.historyId ? { before, history_id: cursor.historyId } : { before };
  earlier.ref = connection.send("history.older", payload, conversations.current);
}

/**
 * Whether entries older than those shown are kept (`more`); without, the beginning is shown.
 * @param {unknown} more
 */
function olderDone(more) {
  earlier.done = !more;
  feed.topLine(earlier.done ? "start" : "");
}

/** The request for older entries is over without its page (the link dropped, the agent refused it). */
function olderLost() {
  earlier.asking = earlier.ref = null;
  feed.topLine(earlier.done ? "start" : "");
}

/** A history message: what we missed (after device.welcome), one live entry, or an older page. */
function showHistory(history) {
  if (history.reset) {
    ui.feed.replaceChildren();
    deck.clear();
    boards.open.clear();
    conversations.clear();
    Object.assign(earlier, { asking: null, ref: null, done: false, gap: null });
    feed.topLine("");
  }
  cursor.restart(history.history_id, history.reset);
  for (const info of Array.isArray(history.conversations) ? history.conversations : []) {
    if (typeof info?.conversation_id !== "string") continue;
    const closed = typeof info.closed === "boolean" ? info.closed : null;
    conversations.update(info.conversation_id, { title: info.title, closed, seq: info.last_seq });
    conversations.dated(info.conversation_id, info.updated_at);
  }
  const entries = Array.isArray(history.entries) ? history.entries : [];
  const older = () => entries.forEach((entry) => showEntry(entry, false, true));
  if (typeof history.before === "number") {
    // the page a history.older asked for: above everything shown (a late or repeated one: dropped)
    if (history.before !== earlier.asking) return;
    earlier.asking = earlier.ref = null;
    feed.above(() => cursor.older(older));
    olderDone(history.earlier);
    askOlder(); // still near the top (nothing of this conversation in that page): the next one
  } else if (history.older) {
    // an older page of what was missed (the catch-up came newest page first): between what was
    // shown before and that page, kept there too
    feed.above(() => cursor.older(older, { gap: true }), earlier.gap);
  } else if (Array.isArray(history.conversations)) {
    // the first message of a catch-up; shown nothing of this history before, we are told whether it has more
    const fresh = cursor.oldest === null;
    earlier.gap = ui.feed.lastElementChild;
    cursor.mark();
    for (const entry of entries) showEntry(entry);
    earlier.ready = true;
    if (fresh || history.earlier) olderDone(history.earlier);
    askOlder();
  } else for (const entry of entries) showEntry(entry);
}

/** Show the card of `callId` (a notification was clicked): its conversation, scrolled to and focused. */
function openCard(callId) {
  const card = deck.cards.get(callId);
  if (!card) return false;
  const where = card.el.dataset.conversation;
  if (where && where !== conversations.current) conversations.select(where);
  card.el.scrollIntoView({ block: "center" });
  card.el.focus({ preventScroll: true });
  return true;
}

function showConnect(error = "") {
  ui.chatView.hidden = true;
  ui.connectView.hidden = false;
  ui.connectButton.disabled = false;
  ui.connectError.textContent = error;
  ui.connectError.hidden = !error;
  (error || !ui.token.value ? ui.token : ui.connectButton).focus();
}

function showChat() {
  ui.connectView.hidden = true;
  ui.chatView.hidden = false;
}

const HANDLERS = {
  "device.welcome": (payload) => {
    deck.welcomed(payload.device_id); // over the relay the agent knows this device by its pairing's id
    cursor.follow(connection.agentId);
    deck.plugins.refresh(agentApi(connection.host, connection.token));
    ui.agentName.textContent = connection.agentId;
    notifier.welcome(payload);
    const wasHidden = ui.chatView.hidden;
    showChat();
    if (wasHidden && matchMedia("(pointer: fine)").matches) ui.message.focus(); // no surprise keyboard on phones
  },
  "agent.status": (payload) => showAgentStatus(ui.status, ui.stop, payload),
  text: (payload, envelope) => feed.agentText({ ...payload, text: String(payload.text ?? "") }, envelope.timestamp),
  "message.delta": (payload, envelope) => feed.delta({ ...payload, text: String(payload.text ?? "") }, envelope.timestamp),
  "file.stored": (payload) => uploads.stored(payload),
  "tool.call": (payload) => {
    notifier.card(payload);
    deck.call(payload);
  },
  "tool.cancel": (payload) => {
    notifier.settled(payload.call_id);
    deck.cancel(payload);
  },
  error: (payload) => {
    if (payload.code === "auth_failed") return; // the close that follows says it
    if (earlier.ref !== null && payload.ref === earlier.ref) olderLost(); // said below, like any refusal
    if (payload.upload_id && uploads.failed(payload)) return; // told with the message it belonged to
    if (deliveries.refused(payload.ref, String(payload.message ?? payload.code))) return; // marked on it
    if (!deck.problem(payload)) feed.message("system", `The agent refused a message: ${payload.message}`);
  },
};

const connection = new Transport({
  onMessage: ({ kind, payload, envelope }) => {
    if (kind === "history") return showHistory(payload);
    if (!cursor.fresh(envelope.seq)) return; // shown already (from the history, or before a reconnect)
    // other kinds: nothing to show
    inConversation(envelope.conversation_id, () => HANDLERS[kind]?.(payload, envelope), { seq: envelope.seq });
    if (typeof envelope.seq === "number" && kind !== "agent.status") {
      // drawn again on the next load
      cursor.remember({ k: kind, p: payload, c: envelope.conversation_id, s: envelope.seq, t: envelope.timestamp });
    }
    cursor.advance(envelope.seq);
  },
  onState: (state) => {
    showLink(ui.link, state);
    if (state !== "connected") {
      earlier.ready = false; // older pages are asked for again after the next catch-up
      if (earlier.asking !== null) olderLost();
    }
    $("reconnect").hidden = state !== "reconnecting"; // waiting out a backoff: offer to try at once
    deck.link(state);
  },
  onAuthFailed: () => {
    forgetToken(); // a reload must not retry it; the field keeps it for correcting
    showConnect(WRONG_TOKEN);
  },
  onUnreachable: (message) => showConnect(message),
  onPath: (path) => {
    ui.path.dataset.path = path;
    [ui.path.textContent, ui.path.title] = PATHS[path];
  },
  onRefused: (message) => {
    feed.message("system", message);
    if (!connection.token) showConnect(message);
  },
  onPaired: () => feed.message("system", "Paired: this App will reach the agent through the relay when away from home."),
  onProblem: (message) => feed.message("system", message),
  openCalls: () => deck.openCalls(),
  resume: () => cursor.hello(),
});

const deliveries = new Deliveries(feed, connection);
feed.onTop = askOlder;

function start({ host, token }) {
  ui.host.value = host;
  ui.token.value = token;
  connection.connect(host, token);
}

ui.connectForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const host = ui.host.value.trim() || location.host;
  const token = ui.token.value.trim();
  if (!token && loadPairing()) {
    showChat(); // opened away from the agent: the pairing reaches it by relay
    connection.connectRelay();
    return;
  }
  if (!token) {
    showConnect("Enter the token printed by the agent.");
    return;
  }
  saveCredentials({ host, token });
  ui.connectError.hidden = true;
  ui.connectButton.disabled = true;
  start({ host, token });
});

const uploads = new Uploads(
  (kind, payload) => connection.send(kind, payload, conversations.current),
  () => (connection.path === "relay" ? RELAY_CHUNK_BYTES : CHUNK_BYTES),
);
let chosen = []; // files picked for the next message

function showTray() {
  ui.tray.replaceChildren(
    ...chosen.map((file, index) =>
      h(
        "span",
        { class: "chip" },
        `${file.name || "photo"} · ${readableSize(file.size)}`,
        h("button", {
          type: "button",
          class: "icon",
          "aria-label": `Remove ${file.name || "photo"}`,
          onclick: () => {
            chosen.splice(index, 1);
            showTray();
          },
        }, "×"),
      ),
    ),
  );
  ui.tray.hidden = chosen.length === 0;
}

for (const input of [ui.photo, ui.file]) {
  input.addEventListener("change", () => {
    chosen.push(...input.files);
    input.value = "";
    showTray();
  });
}

/**
 * Upload the files, then send the text that carries them (in `conversation`); the envelope's id.
 * A refusal is said and nothing is sent.
 * @param {string} text
 * @param {File[]} files
 * @param {string} conversation
 */
async function sendWithFiles(text, files, conversation) {
  try {
    const attachments = await Promise.all(files.map((file) => uploads.upload(file)));
    return connection.send("text", { text, attachments }, conversation);
  } catch (error) {
    feed.message("system", `Not sent: ${error.message}`);
    throw error;
  }
}

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.message.value.trim();
  if (!text && !chosen.length) return;
  const conversation = conversations.current;
  if ([...text].length > MAX_TEXT) {
    // the agent would refuse it: said on the message, which stays in the box to be shortened
    const why = `too long (at most ${MAX_TEXT.toLocaleString("en")} characters)`;
    feed.mark(feed.message("user", text), "failed", { why });
    feed.toNewest();
    return;
  }
  if (chosen.length) {
    const files = chosen.splice(0);
    const shown = files.map((file) => ({ name: file.name || "photo", mime: file.type, size: file.size, blob: file }));
    deliveries.start(feed.message("user", text, shown), () => sendWithFiles(text, files, conversation));
    showTray();
  } else {
    deliveries.text(feed.message("user", text), text, conversation);
  }
  feed.toNewest(); // what the user sends is shown, even if they had scrolled up
  if (text) conversations.guess(conversations.current, text);
  ui.message.value = "";
  fitMessageBox();
});

function fitMessageBox() {
  ui.message.style.height = "auto";
  ui.message.style.height = `${ui.message.scrollHeight + 2}px`;
}

ui.message.addEventListener("input", fitMessageBox);

ui.message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.stop.addEventListener("click", () => {
  connection.send("agent.stop", { reason: "the user pressed stop" }, conversations.current);
  feed.message("system", "Asked the agent to stop.");
});

// back on the page (a phone woke up, the tab was chosen again): reconnect now, not after the backoff
document.addEventListener("visibilitychange", () => document.visibilityState === "visible" && connection.retryNow());
$("retry-now").addEventListener("click", () => connection.retryNow());

const statusView = new StatusView($("stats"), () => agentApi(connection.host, connection.token));
$("stats-button").addEventListener("click", () => statusView.open());

ui.disconnect.addEventListener("click", () => {
  connection.disconnect();
  showConnect();
});

const saved = loadCredentials();
ui.host.value = saved.host;
replay(cursor.items); // what this page showed before it was loaded
// texts a previous load left waiting: drawn again, sent again once connected
deliveries.restore((kept) => {
  /** @type {HTMLElement | undefined} */
  let bubble;
  inConversation(kept.conversation, () => (bubble = feed.message("user", kept.text, [], { at: kept.at })), { counts: false });
  return /** @type {HTMLElement} */ (bubble);
});
if (saved.token) {
  conversations.select(conversations.current);
  showChat();
  start(saved);
} else if (loadPairing()) {
  showChat();
  connection.connectRelay();
} else {
  showConnect(pairingProblem);
}
