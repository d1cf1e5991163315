"""The devices of a session: its links, their handshake state, and the agent's messages to them.

A *link* is whatever hashable object the driver names a connection with. A link opened with a
``verify`` function is attached once its ``device.hello`` passes; a link its transport vouches
for is attached at once. :class:`Devices` keeps which links are open and attached, encodes the
agent's envelopes for them (every ``timestamp`` from the session's clock) and puts what it sends
in the session's :class:`~.outputs.Outbox`. What an attached device is sent on welcome is the
session's to say (:mod:`.session`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic

from ..errors import CallStateError
from . import codec
from .calls import format_timestamp
from .messages import Actor, DeviceHello, Error, Payload
from .outputs import DevicesChanged, L, Outbox

#: close codes a session asks a link to close with (WebSocket application codes)
AUTH_FAILED = 4401
BAD_HELLO = 4400

#: a hello check: None to accept it, else the reason it is refused (told to the App)
Verifier = Callable[[DeviceHello], "str | None"]


#: the longest device name kept (a hello may say more; the rest is cut)
MAX_NAME = 120
#: how many device names are kept (the devices that attached most recently)
MAX_NAMES = 1024


@dataclass
class LinkState:
    """One open link: how it is named, how its hello is checked, the device once attached."""

    name: str
    verify: Verifier | None
    device_id: str | None = None
    #: the longest message the link carries (None: no limit of its own)
    max_text: int | None = None

    @property
    def attached(self) -> bool:
        """Whether the link passed its handshake."""
        return self.device_id is not None


@dataclass(frozen=True, slots=True)
class Peer(Generic[L]):
    """An attached App device as the agent's side sees it: its id and the link that reaches it."""

    device_id: str
    link: L


class Devices(Generic[L]):
    """The open links of a session and the agent's messages to them (see the module docstring)."""

    def __init__(self, out: Outbox[L], *, agent_id: str, conversation_id: str) -> None:
        self.out = out
        self.agent = Actor(kind="agent", id=agent_id)
        #: the conversation a message belongs to when none is named
        self.conversation_id = conversation_id
        self._links: dict[L, LinkState] = {}
        #: the attached links and their devices, in the order they attached
        self._attached: dict[L, str] = {}
        #: the head of the agent's messages to each device in each conversation (see ``codec.envelope_head``)
        self._heads: dict[tuple[str | None, str], str] = {}
        #: how many attached links set a size limit (none: no call can be too long for a link)
        self._limited = 0
        #: how people call each device that attached (its hello's ``name``), most recent last
        self._names: dict[str, str] = {}
        self._stamp: tuple[float, str] = (float("nan"), "")

    # ---------------------------------------------------------------------------- reading

    @property
    def peers(self) -> list[Peer[L]]:
        """The attached devices, in the order they attached."""
        return [Peer(device_id, link) for link, device_id in self._attached.items()]

    def items(self) -> Iterator[tuple[L, str]]:
        """The attached links and their device ids, in the order they attached."""
        return iter(list(self._attached.items()) if len(self._attached) > 1 else self._attached.items())

    def __bool__(self) -> bool:
        return bool(self._attached)

    def state(self, link: L) -> LinkState | None:
        """The state of ``link`` if it is open."""
        return self._links.get(link)

    def attached(self, link: L) -> bool:
        """Whether ``link`` passed its handshake and is attached."""
        state = self._links.get(link)
        return state is not None and state.attached

    def device_id(self, link: L) -> str | None:
        """The device ``link`` belongs to, once attached."""
        state = self._links.get(link)
        return state.device_id if state is not None else None

    def name_of(self, device_id: str | None) -> str | None:
        """How people call ``device_id`` (the name its last hello gave), or None."""
        return self._names.get(device_id) if device_id is not None else None

    def conversation(self, conversation_id: str | None) -> str:
        """A conversation id fit for an envelope: the session's when none, cut to 200 characters."""
        return conversation_id[:200] if conversation_id else self.conversation_id

    # ------------------------------------------------------------------------------ links

    def open(self, link: L, *, name: str, verify: Verifier | None, max_text: int | None) -> LinkState:
        """Keep a new link (not attached yet)."""
        if link in self._links:
            raise CallStateError(f"link {name} is already open")
        state = self._links[link] = LinkState(name=name, verify=verify, max_text=max_text)
        return state

    def attach(self, link: L, device_id: str, name: str | None = None) -> None:
        """``link`` belongs to ``device_id`` from now on (audited, the runtime is told); ``name``: how
        people call the device (its hello's), shown on the cards it answers."""
        state = self._links[link]
        state.device_id = device_id
        if link not in self._attached and state.max_text is not None:
            self._limited += 1
        self._attached[link] = device_id
        if name:
            self._names.pop(device_id, None)
            self._names[device_id] = " ".join(name.split())[:MAX_NAME]
            while len(self._names) > MAX_NAMES:
                del self._names[next(iter(self._names))]
        self.out.audit("device.attach", device_id=device_id)

    def _forget(self, link: L) -> LinkState | None:
        state = self._links.pop(link, None)
        if self._attached.pop(link, None) is not None and state is not None and state.max_text is not None:
            self._limited -= 1
        return state

    def detach(self, link: L) -> str | None:
        """``link`` closed: forget it; the device it belonged to when no other link of it stays open."""
        state = self._forget(link)
        if state is None or state.device_id is None:
            return None
        device_id = state.device_id
        self.out.audit("device.detach", device_id=device_id)
        self.out.event(DevicesChanged(device_id, attached=False))
        alone = not any(other.device_id == device_id for other in self._links.values())
        return device_id if alone else None

    def refuse(self, link: L, code: str, message: str, close_code: int) -> None:
        """Tell ``link`` why it is refused (an ``error``), close it and forget it."""
        self.out.send(link, self.encode(Error(code=code, message=message)))
        self.out.close(link, close_code, message)
        self._forget(link)

    # --------------------------------------------------------------------------- messages

    def timestamp(self) -> str:
        """Now by the session's clock, as an envelope's ``timestamp``."""
        now = self.out.clock()
        if self._stamp[0] != now:
            self._stamp = (now, format_timestamp(now))
        return self._stamp[1]

    def encode(
        self,
        payload: Payload,
        device_id: str | None = None,
        *,
        conversation_id: str | None = None,
        seq: int | None = None,
    ) -> str:
        """The wire text of ``payload`` sent by the agent to ``device_id`` (or to the user), stamped now.

        ``conversation_id`` defaults to the session's; ``seq`` is the history entry the message
        is the live form of.
        """
        key = (device_id, conversation_id or self.conversation_id)
        head = self._heads.get(key)
        if head is None:  # written once per device and conversation: every message to it starts so
            if len(self._heads) >= 1024:
                self._heads.clear()
            target = Actor(kind="device", id=device_id) if device_id else Actor(kind="human", id="user")
            head = self._heads[key] = codec.envelope_head(self.agent, target, key[1])
        return codec.encode_headed(payload, head, seq=seq, timestamp=self.timestamp())

    def reply(self, link: L, payload: Payload) -> None:
        """Send ``payload`` to the device on ``link`` (an open link; attached or not)."""
        state = self._links.get(link)
        if state is not None:
            self.out.send(link, self.encode(payload, state.device_id))

    def broadcast(
        self,
        payload: Payload,
        *,
        conversation_id: str | None = None,
        seq: int | None = None,
        call_id: str | None = None,
    ) -> int:
        """Send ``payload`` to every attached device (in ``conversation_id``, as entry ``seq``, about
        call ``call_id``); returns to how many."""
        for link, device_id in self._attached.items():
            self.out.send(link, self.encode(payload, device_id, conversation_id=conversation_id, seq=seq), call_id)
        return len(self._attached)

    def max_text(self, link: L) -> int | None:
        """The longest message ``link`` carries, if it sets a limit."""
        state = self._links.get(link)
        return state.max_text if state is not None else None

    def too_long(self, text_for: Callable[[str], str]) -> tuple[str, int, int] | None:
        """The first attached link whose limit the text ``text_for`` its device is over: the link's
        name, the limit and the size; None when every link carries it."""
        if not self._limited:
            return None
        for link, device_id in self._attached.items():
            limit = self._links[link].max_text
            if limit is not None:
                size = len(text_for(device_id).encode())
                if size > limit:
                    return self._links[link].name, limit, size
        return None
