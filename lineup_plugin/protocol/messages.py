"""Payload models of every LineUp v1 message kind, and the envelope that carries them.

Kinds (the envelope ``type`` is ``"lineup.v1." + kind``):

=================  ===============  =====================================================
kind               direction        purpose
=================  ===============  =====================================================
``device.hello``   App → agent      device id, App version, protocol version, credentials
``device.welcome`` agent → App      the session is open; agent identity
``tool.list``      both             declare tools, or ask for the other side's tools
``tool.call``      both             call a tool
``tool.ack``       both             the call arrived (``acknowledged``) / is shown (``waiting_user``)
``tool.result``    both             the terminal status and structured result of a call
``tool.cancel``    both             cancel a call that has not finished
``agent.status``   agent → App      idle / thinking / waiting_input / running / interrupted / failed
``agent.stop``     App → agent      the user pressed stop
``text``           both             a chat message (App → user message; agent reply → App), maybe with files
``message.delta``  agent → App      a piece of an agent reply still being written (same ``message_id``)
``file.begin``     App → agent      an upload starts: name, type, size, SHA-256
``file.chunk``     App → agent      the next base64 piece of an upload
``file.stored``    agent → App      an upload is complete and kept; the file to attach to a ``text``
``error``          both             a message was refused; says why
``history``        agent → App      numbered past events a device missed; the conversations
``history.older``  App → agent      the user scrolled up: the page of entries before the oldest shown
``push.subscribe`` App → agent      the device's Web Push subscription (or none: stop pushing to it)
=================  ===============  =====================================================

An envelope from the agent may carry ``seq``: the number of the history entry it is the live
form of (see :class:`History`). A device keeps the highest ``seq`` it has seen and names it as
``last_seq`` in its next ``device.hello``, like SSE's ``Last-Event-ID``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from .base import MAX_ERROR_CHARS, WireModel, bounded
from .tools import ToolDefinition

PROTOCOL_VERSION: Final = 1
TYPE_PREFIX = "lineup.v1."
#: the longest envelope ``type`` (``lineup.v1.`` and the longest kind are 24 characters)
MAX_TYPE = 64

CallStatus = Literal["completed", "rejected", "cancelled", "expired", "unsupported", "failed"]
AgentState = Literal["idle", "thinking", "waiting_input", "running", "interrupted", "failed"]
ActorKind = Literal["agent", "human", "device", "group", "system"]


def _iso_timestamp(value: str) -> str:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not an ISO 8601 timestamp: {value!r}") from None
    return value


Timestamp = Annotated[str, AfterValidator(_iso_timestamp)]
Identifier = Annotated[str, Field(min_length=1, max_length=200)]
#: the id of something else a message refers to (optional, so it may be empty): as long as an :data:`Identifier`
Reference = Annotated[str, Field(max_length=200)]
#: the longest label people read: a device's name, an App's version, a risk level, an origin
MAX_LABEL = 120
Label = Annotated[str, Field(max_length=MAX_LABEL)]
#: the longest free text that says why or what: a cancel's or a stop's reason, a status's detail (in
#: characters; as long as an error text may be)
MAX_REASON = MAX_ERROR_CHARS
Reason = Annotated[str, Field(max_length=MAX_REASON)]
#: free text only the agent sends (a status's detail, an error's message): cut to :data:`MAX_REASON`
#: characters (with an ellipsis) rather than refused, so a runtime's long error text, or one kept by an
#: older version, never stops a message (an App's ``agent.status`` or ``error`` is refused as a kind)
Told = Annotated[str, AfterValidator(bounded), WithJsonSchema({"type": "string", "maxLength": MAX_REASON})]
#: the longest token a ``device.hello`` may carry
MAX_TOKEN = 1024
#: how many open cards a hello may list
MAX_OPEN_CALLS = 1000
#: the largest sequence number: the largest integer a JavaScript number holds exactly
MAX_SEQ = 2**53 - 1
Seq = Annotated[int, Field(ge=0, le=MAX_SEQ)]
#: how many files one ``text`` may carry
MAX_ATTACHMENTS = 10
#: the largest file carried inline (base64 in ``Attachment.data``), e.g. over the relay (bytes): the
#: official WuKongIM JS SDK turns a message's bytes into text with one ``String.fromCharCode.apply``
#: call, which overflows a browser's stack past about 120,000 bytes; a sealed envelope is about 1.8×
#: the file
INLINE_MAX = 48 * 1024
#: the largest base64 piece of one ``file.chunk`` (characters; 512 KiB of file)
MAX_CHUNK_CHARS = 4 * 512 * 1024 // 3 + 4
#: the longest text of a chat message or of one delta
MAX_TEXT = 100_000
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class Actor(WireModel):
    """Who sent or should receive a message."""

    kind: ActorKind
    id: Identifier


class DeviceHello(WireModel):
    """First message of an App session.

    ``token`` is only used by the direct transport. ``open_calls`` lists the call ids whose cards
    the App still shows, so the agent can re-send the live ones and close the others (at most
    :data:`MAX_OPEN_CALLS`). Without ``device_id`` the device is the envelope's ``sender.id``
    (as the seed documents write a hello).

    ``last_seq`` asks for the history: the entries after it (0: everything kept) come in
    ``history`` messages right after ``device.welcome``. ``history_id`` names the history the
    device's ``last_seq`` counts in (from an earlier ``history``); when it is not the agent's,
    or ``last_seq`` is ahead of it, the device gets everything kept with ``reset``. With
    ``newest_first`` the catch-up comes newest page first (at most
    :data:`~lineup_plugin.protocol.history.FIRST_PAGE_CHARS`), before the live calls. A device
    that resumes (``last_seq`` above 0, in this history) gets the rest of what it missed after
    them, in pages marked ``older``; a new one (``last_seq`` 0, or ``reset``) gets only that page,
    marked ``earlier`` when older entries are kept, and asks for them with ``history.older``
    when the user scrolls up (see :class:`HistoryOlder`).

    ``name`` is how people call the device; the agent keeps it on one line, cut to
    :data:`~lineup_plugin.protocol.devices.MAX_NAME` characters.
    """

    device_id: Identifier | None = None
    app_version: Reason | None = None
    protocol_version: int = PROTOCOL_VERSION
    token: str | None = Field(default=None, max_length=MAX_TOKEN, repr=False)
    name: Reason | None = None
    open_calls: list[Identifier] = Field(default_factory=list, max_length=MAX_OPEN_CALLS)
    last_seq: Seq | None = None
    history_id: Identifier | None = None
    newest_first: bool = False


class DeviceWelcome(WireModel):
    """The agent accepted the device; ``pending`` calls follow as ``tool.call`` messages.

    ``push_key``: the agent's VAPID public key (base64url) when it sends Web Push; an App that
    may notify subscribes with it (``applicationServerKey``) and answers ``push.subscribe``.
    """

    device_id: Identifier
    agent: Actor
    protocol_version: int = PROTOCOL_VERSION
    pending: int = 0
    push_key: str | None = Field(default=None, max_length=200)


class ToolList(WireModel):
    """Declares the sender's tools; with ``request`` set, also asks for the receiver's."""

    tools: list[ToolDefinition] = Field(default_factory=list)
    request: bool = False


#: what kind of agent session asks (the App names it on the card)
OriginKind = Literal["cli", "chat", "gateway", "cron", "subagent", "mcp", "process"]


class Origin(WireModel):
    """Which agent session asks: its kind (``cli``, ``chat`` for a one-shot chat, ``gateway``,
    ``cron``, ``subagent``, ``mcp``, ``process``) and a short label for people (e.g. the program)."""

    kind: OriginKind
    label: Label | None = None


class ToolCall(WireModel):
    """A request to run one action of one tool; ``call_id`` pairs it with its result.

    ``origin`` (optional) says which agent session asks, when one agent runs several.
    """

    call_id: Identifier
    name: Identifier
    action: Reference | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    expires_at: Timestamp | None = None
    risk: Label | None = None
    origin: Origin | None = None


class ToolAck(WireModel):
    """Progress of a call on the answering side: it arrived, or it is now shown to the user."""

    call_id: Identifier
    stage: Literal["acknowledged", "waiting_user"] = "acknowledged"


class ToolResult(WireModel):
    """The terminal answer to a call. ``result`` is an object, e.g. ``{"selected": "x", "index": 1}``.

    The seed examples omit ``status`` (read as ``completed``) and sometimes ``name``/``action``.
    """

    call_id: Identifier
    name: Reference | None = None
    action: Reference | None = None
    status: CallStatus = "completed"
    result: dict[str, Any] = Field(default_factory=dict)


class CallOutcome(WireModel):
    """How a call ended, as the session decided it: the ``status`` and ``result`` the agent got, and
    the device whose answer that was (``device_id``, and ``device_name`` as people call it, from
    its ``device.hello``), or neither when nobody answered (expired, cancelled, failed)."""

    status: CallStatus
    result: dict[str, Any] = Field(default_factory=dict)
    device_id: str | None = Field(default=None, max_length=256)
    device_name: Label | None = None


class ToolCancel(WireModel):
    """A call ended, or was withdrawn; ``reason`` is shown to the user (e.g. "answered on another device").

    ``outcome`` is the session's verdict, sent to every device when a call ends — the one whose
    answer won too — and to a device that asks about a call that ended (its hello's
    ``open_calls``, an answer that came too late): a card shows it instead of its own guess.
    """

    call_id: Identifier
    reason: Reason | None = None
    outcome: CallOutcome | None = None


class AgentStatus(WireModel):
    """What the agent is doing now (a longer ``detail`` is cut, with an ellipsis)."""

    state: AgentState
    detail: Told | None = None


class AgentStop(WireModel):
    """The user pressed stop: end the agent's current run and cancel its pending calls."""

    reason: Reason | None = None


class Attachment(WireModel):
    """A file that goes with a ``text``: kept by the agent under its SHA-256 (``id``).

    From the agent, ``url`` is where the App fetches it (same origin, with a key that only the
    token's holder gets); over a link without URLs (the relay) a file up to :data:`INLINE_MAX`
    bytes travels as base64 ``data`` instead. From the App, ``id`` names a file already uploaded
    (``file.stored``), or ``data`` carries it inline.
    """

    id: Sha256
    name: str = Field(min_length=1, max_length=255)
    mime: str = Field(min_length=3, max_length=127, pattern=r"^[A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+$")
    size: int = Field(ge=0)
    url: str | None = Field(default=None, max_length=512)
    data: str | None = Field(default=None, max_length=4 * INLINE_MAX // 3 + 4, repr=False)


class Text(WireModel):
    """A chat message between the user and the agent.

    ``message_id`` stays the same for one message however it travels: the ``message.delta``
    pieces of a streamed reply and the final ``text`` share it. ``interrupted`` marks a reply
    whose run stopped before it was complete (``text`` is then what was written until then).
    """

    text: str = Field(max_length=MAX_TEXT)
    reply_to: Reference | None = None
    message_id: Identifier | None = None
    attachments: list[Attachment] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)
    interrupted: bool = False


class MessageDelta(WireModel):
    """A piece of an agent reply still being written: append ``text`` (or put it in place, ``replace``).

    ``seq`` counts the pieces of one ``message_id`` from 0, so a piece out of order or missed is
    noticed; the ``text`` with the same ``message_id`` settles the message.
    """

    message_id: Identifier
    seq: int = Field(ge=0)
    text: str = Field(max_length=MAX_TEXT)
    replace: bool = False


class FileBegin(WireModel):
    """An upload starts. Its ``file.chunk`` pieces follow; the agent checks ``size`` and type first.

    ``sha256``, when the App can compute it (browsers only offer it on https or localhost pages),
    is checked once the file is complete.
    """

    upload_id: Identifier
    name: str = Field(min_length=1, max_length=255)
    mime: str = Field(min_length=3, max_length=127, pattern=r"^[A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+$")
    size: int = Field(ge=0)
    sha256: Sha256 | None = None


class FileChunk(WireModel):
    """The next piece of upload ``upload_id``: ``seq`` from 0, ``data`` base64."""

    upload_id: Identifier
    seq: int = Field(ge=0)
    data: str = Field(max_length=MAX_CHUNK_CHARS, repr=False)


class FileStored(WireModel):
    """Upload ``upload_id`` is complete and kept as ``file`` (attach it to a ``text``)."""

    upload_id: Identifier
    file: Attachment


class Error(WireModel):
    """A message was refused; ``ref`` is the id of the envelope it refers to, if any (a longer
    ``message`` is cut, with an ellipsis)."""

    code: Label
    message: Told
    ref: Reference | None = None
    call_id: Reference | None = None
    upload_id: Reference | None = None


class PushKeys(WireModel):
    """The browser's keys of a push subscription (base64url): its P-256 public key and auth secret."""

    p256dh: str = Field(max_length=200)
    auth: str = Field(max_length=100)


#: the longest push endpoint address taken
MAX_ENDPOINT = 2048


# the shape only: lineup_plugin.push.message.Subscription.from_json reads every subscription (from the
# wire or the agent's subscriptions file) with this model, then checks what it names
class WebPushSubscription(WireModel):
    """A browser's push subscription, as ``PushSubscription.toJSON()`` writes it."""

    endpoint: str = Field(min_length=1, max_length=MAX_ENDPOINT)
    expirationTime: float | None = None
    keys: PushKeys


class PushSubscribe(WireModel):
    """The device's Web Push subscription, sent after every welcome while it may notify; none: stop.

    The agent pushes each waiting card the device does not show to it, sealed for its keys (see
    docs/push.md), and answers an ``error`` ``push_refused`` saying why when it cannot take it.
    """

    subscription: WebPushSubscription | None = None


#: the longest conversation title (a longer one is refused from an App, cut when the agent names one)
MAX_TITLE = 200


def _no_blank_title(title: str) -> str:
    if not title.strip():
        raise ValueError("a title must not be blank")
    return title


class ConversationUpdate(WireModel):
    """The user renames (``title``) or closes (``closed``) the envelope's conversation.

    At least one of them is set. Every device is told by a ``conversation`` history entry; a
    closed conversation opens again with its next entry.
    """

    title: Annotated[str, Field(max_length=MAX_TITLE), AfterValidator(_no_blank_title)] | None = None
    closed: bool | None = None

    @model_validator(mode="after")
    def _something(self) -> ConversationUpdate:
        if self.title is None and self.closed is None:
            raise ValueError("conversation.update needs a title or closed")
        return self


HistoryEvent = Literal["text.in", "text.out", "call", "call.end", "status", "conversation"]


class HistoryEntry(WireModel):
    """One numbered event of a conversation, as the agent's store keeps it.

    ``event`` says which fields are set: ``text.in`` (the user's ``text`` and ``attachments``,
    typed on ``device_id``; ``ref`` is the id of the App's envelope), ``text.out`` (the agent's
    ``text`` and ``attachments`` as message ``message_id``; ``interrupted`` when it was cut short),
    ``call`` (the ``call`` the agent made), ``call.end`` (its terminal ``result``; ``device_id``
    answered it, none when it ended otherwise), ``status`` (the agent's ``status``),
    ``conversation`` (the conversation is called ``title``; ``closed`` when it was closed).
    ``device_name`` is how people call ``device_id`` (from its ``device.hello``).
    """

    seq: Seq
    at: Timestamp
    conversation_id: Identifier
    event: HistoryEvent
    device_id: str | None = None
    device_name: str | None = None
    ref: str | None = None
    text: str | None = None
    message_id: str | None = None
    attachments: list[Attachment] | None = None
    interrupted: bool | None = None
    call: ToolCall | None = None
    result: ToolResult | None = None
    status: AgentStatus | None = None
    title: str | None = None
    closed: bool | None = None


class ConversationInfo(WireModel):
    """A conversation the agent keeps history of: its id, its title, its latest entry, whether it is closed."""

    conversation_id: Identifier
    title: str | None = None
    last_seq: Seq = 0
    updated_at: Timestamp | None = None
    closed: bool = False


class History(WireModel):
    """Numbered events in order: what a device missed since its ``last_seq``, one live event, or
    the page a ``history.older`` asked for.

    ``history_id`` names this agent's history (a device keeps it with its ``last_seq``); ``head``
    is the newest seq; ``reset``: the device's ``last_seq`` does not count in this history, so it
    drops what it shows first; ``more``: the next ``history`` message continues this one. The
    first message of a catch-up lists the ``conversations`` kept. ``older``: these entries come
    before every entry sent so far in this catch-up (its hello asked ``newest_first``): shown
    above them, below what the device showed before. ``before``: the answer to a
    ``history.older`` for the entries before that seq (shown above everything). ``earlier``: older
    entries than the first of these are kept and were not sent (ask with ``history.older``).
    """

    history_id: Identifier
    head: Seq
    entries: list[HistoryEntry] = Field(default_factory=list)
    conversations: list[ConversationInfo] | None = None
    reset: bool = False
    more: bool = False
    older: bool = False
    before: Seq | None = None
    earlier: bool = False


class HistoryOlder(WireModel):
    """The user scrolled up to the oldest entry the device shows: send the page before it.

    ``before`` is the lowest seq the device holds (of ``history_id``, the history it counts in;
    the envelope's ``conversation_id`` does not filter: a page holds every conversation's entries,
    like the catch-up). The answer is one ``history`` message with ``before`` set: the newest
    entries with a seq below it (at most
    :data:`~lineup_plugin.protocol.history.FIRST_PAGE_CHARS`), ``earlier`` when older ones are
    kept; no entries and no ``earlier`` at the beginning of the history. A ``before`` beyond the
    agent's newest entry, or another ``history_id``, is refused (``unknown_history``): the device
    catches up with a new ``device.hello``.
    """

    before: Annotated[int, Field(ge=1, le=MAX_SEQ)]
    history_id: Identifier | None = None


Payload = (
    DeviceHello
    | DeviceWelcome
    | ToolList
    | ToolCall
    | ToolAck
    | ToolResult
    | ToolCancel
    | AgentStatus
    | AgentStop
    | Text
    | MessageDelta
    | FileBegin
    | FileChunk
    | FileStored
    | Error
    | History
    | HistoryOlder
    | PushSubscribe
    | ConversationUpdate
)

#: payload model by kind
KINDS: dict[str, type[WireModel]] = {
    "device.hello": DeviceHello,
    "device.welcome": DeviceWelcome,
    "tool.list": ToolList,
    "tool.call": ToolCall,
    "tool.ack": ToolAck,
    "tool.result": ToolResult,
    "tool.cancel": ToolCancel,
    "agent.status": AgentStatus,
    "agent.stop": AgentStop,
    "text": Text,
    "message.delta": MessageDelta,
    "file.begin": FileBegin,
    "file.chunk": FileChunk,
    "file.stored": FileStored,
    "error": Error,
    "history": History,
    "history.older": HistoryOlder,
    "push.subscribe": PushSubscribe,
    "conversation.update": ConversationUpdate,
}
KIND_OF: dict[type[WireModel], str] = {model: kind for kind, model in KINDS.items()}


class EnvelopeHeader(WireModel):
    """The envelope fields, with the payload not yet decoded."""

    v: Literal[1]
    id: Identifier
    type: Annotated[str, Field(max_length=MAX_TYPE)]
    conversation_id: Identifier
    sender: Actor
    target: Actor
    timestamp: Timestamp | None = None
    seq: Seq | None = None
    payload: dict[str, Any]


class Envelope(WireModel):
    """One LineUp message: ``{v, id, type, conversation_id, sender, target, timestamp, payload}``.

    ``id`` is the idempotency key. Build one with :func:`lineup_plugin.protocol.codec.envelope`.
    ``seq`` (agent → App) numbers the history entry this message is the live form of.
    """

    v: Literal[1] = PROTOCOL_VERSION
    id: Identifier
    type: str
    conversation_id: Identifier
    sender: Actor
    target: Actor
    timestamp: Timestamp | None = None
    seq: Seq | None = None
    payload: Payload

    @property
    def kind(self) -> str:
        """The kind without the ``lineup.v1.`` prefix, e.g. ``"tool.call"``."""
        return self.type.removeprefix(TYPE_PREFIX)
