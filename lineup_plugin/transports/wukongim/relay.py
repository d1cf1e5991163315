"""The relay transport: LineUp over WuKongIM, for Apps that cannot reach the agent directly.

The plugin logs in to a WuKongIM server as the agent's uid and talks to the App user's uid on
their person channel. On the wire (the message payload, before WuKongIM encrypts it):

* a LineUp envelope travels as a custom content type (9527 unless configured), the way the
  official SDKs register custom content: ``{"type": 9527, "envelope": {...the envelope...}}``;
* plain text from the App user, ``{"type": 1, "content": "..."}``, becomes a user message
  (a ``text`` envelope handed to the hub);
* an App user whose client shows only text (a stock WuKongIM or TangSengDaoDao app: it never
  sent a LineUp envelope, or the setting ``text_cards`` says so) gets every card as a text
  message instead, and their replies are read as answers (see
  :mod:`~lineup_plugin.transports.wukongim.textmode`);
* anything else, and anything from another uid, is ignored.

With pairing (:mod:`~lineup_plugin.transports.wukongim.pairing`; ``wukongim.e2e``, on by default
when the relay is started from settings) every envelope travels sealed end to end instead,
``{"type": 9527, "e2e": {...}}`` (:mod:`~lineup_plugin.transports.wukongim.e2e`): each paired App
device is a link of its own (device ``wukongim:<uid>/<pairing id>``), attached once the agent is
connected, whose envelopes are sealed for it alone; an envelope in clear from the App user is
refused, and a sealed one from a revoked or unknown pairing is answered, once, with ``{"type":
9527, "refused": {"code": "pairing_revoked" | "not_paired", "message": ...}}`` in clear, so that
App can say why.

The App user appears to the hub as one :class:`RelayLink` (device ``wukongim:<uid>``): the
WuKongIM login vouches for it, so it is attached without a token check once the agent is
connected, and kept across reconnections (the IM stores and forwards; the relay's sender waits
for the connection to come back, and writes each message without waiting for the SENDACK of the
one before, at most :data:`SEND_WINDOW` unacknowledged). Envelopes go to the hub as parsed JSON (never re-encoded); a
``device.hello`` from the App (with its ``open_calls``) re-syncs it — welcome, live calls re-sent,
ended cards closed — as does a reconnection that followed a failed send. A paired device is told
at once, when the agent starts, which calls that start closed (a previous run was killed with
cards open): its IM connection stayed up, so it has no reason to say hello again. IM re-deliveries (same
message id, clientMsgNo or envelope id) are dropped before they reach the hub.

WuKongIM pushes a message only to connections that are up when it arrives. So after a
reconnection the relay fetches what the App user sent meanwhile (``POST /channel/messagesync``
from the last sequence number it saw on the channel) and handles it like pushed messages; and
while connected, every :data:`SYNC_EVERY` seconds while a call is open or messages came, it reads
the channel again from where its last such look ended, so a message stored but never pushed on a
live link (an answer) is handled too (what was pushed already is dropped as a re-delivery).
On the first connection the relay notes where the channel stands before it sends anything: what
was sent before is not replayed, and every answer to this process comes after that note.

Until the first connection is up (one connect timeout at most) a call waits for the devices the
relay will attach rather than fail ``no_app`` at once (:meth:`Hub.expect_device
<lineup_plugin.hub.Hub.expect_device>`); then a call with nobody attached fails ``no_app`` at
once. The pairing file is looked at every :data:`CHECK_EVERY` seconds: the devices ``lineup pair
--revoke`` dropped are detached, so a new call fails ``no_app`` instead of waiting for its deadline.

HTTP API use: ``GET /route`` finds the WebSocket address unless ``ws_url`` is set, with a
``manager_token`` the relay registers the agent's token itself with ``POST /user/token``, and
``POST /channel/messagesync`` catches up after a reconnection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any

import httpx

from lineup_plugin.errors import RelayAuthError, RelayError, RelayProtocolError, TransportError
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.live import closed_reason
from lineup_plugin.protocol.messages import Actor, Text, ToolCancel
from lineup_plugin.transports.wukongim.client import (
    CLIENT_MSG_NO_LENGTH,
    ClientOptions,
    Message,
    SendAck,
    Timers,
    WuKongIMClient,
)
from lineup_plugin.transports.wukongim.proto import MAX_REMAINING_LENGTH, ChannelType, DeviceFlag, Flags
from lineup_plugin.transports.wukongim.textclient import TEXT_CONTENT_TYPE, TextClient, text_payload

from .pairing import Pairings

if TYPE_CHECKING:
    from lineup_plugin.config.settings import WuKongIMSettings
    from lineup_plugin.hub import Hub

log = logging.getLogger(__name__)

DEDUPE_WINDOW = 4096
#: envelopes that may wait for WuKongIM before the relay refuses more (and re-syncs the App later)
OUTBOX_LIMIT = 4096
#: messages written to WuKongIM that may wait for their SENDACK at once; the sender waits for
#: the oldest before it writes more
SEND_WINDOW = 64
SYNC_PAGE = 100
#: seconds between the relay's looks, while connected, at the pairing file (a revocation detaches
#: the devices it dropped) and, while a call is open or messages came, at what the App user sent
#: that WuKongIM stored but never pushed (an answer lost on a live link is fetched then)
CHECK_EVERY = 0.5
SYNC_EVERY = 5.0


def wrap_envelope(text: str, content_type: int) -> bytes:
    """The message payload carrying one encoded envelope (``text`` is JSON from ``codec.encode``)."""
    return f'{{"type":{content_type},"envelope":{text}}}'.encode()


_MSG_KEY_LENGTH = 32  # md5 hex
_AES_BLOCK = 16


#: bytes a sealed envelope adds around the base64url of its ciphertext (pairing id, counter, iv, tag)
_SEAL_OVERHEAD = 200
#: the device flag the App's WuKongIM login uses (the JS SDK's default: web)
APP_DEVICE_FLAG = DeviceFlag.WEB
REVOKED = "this App's pairing was revoked on the agent: pair it again on the LAN (lineup pair)"
NOT_PAIRED = "the agent does not know this App's pairing: pair it again on the LAN (lineup pair)"


def max_envelope_text(uid: str, content_type: int, *, sealed: bool = False) -> int:
    """The largest envelope text, in UTF-8 bytes, that one SEND frame to ``uid`` can carry.

    The SEND body (at most :data:`~lineup_plugin.transports.wukongim.proto.MAX_REMAINING_LENGTH`)
    holds, at any protocol version, the setting byte, clientSeq (u32), clientMsgNo, channel id and
    type, expire (u32) and msgKey before the payload; the payload is the wrapped envelope, AES
    padded (PKCS7 adds 1 to 16 bytes) and base64 encoded (4 characters per 3 bytes).
    """
    fields = 1 + 4 + (2 + CLIENT_MSG_NO_LENGTH) + (2 + len(uid.encode())) + 1 + 4 + (2 + _MSG_KEY_LENGTH)
    base64_room = MAX_REMAINING_LENGTH - fields
    cipher_room = base64_room // 4 * 3 // _AES_BLOCK * _AES_BLOCK  # whole AES blocks that fit
    if sealed:  # the envelope is base64url in the e2e box
        return (cipher_room - 1 - _SEAL_OVERHEAD) // 4 * 3 - 16
    return cipher_room - 1 - len(wrap_envelope("", content_type))


class WuKongIMApi:
    """The few calls of WuKongIM's HTTP API the relay needs."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise RelayError(f"wukongim api {method} {path} failed: {exc}") from None
        if response.status_code == 401:
            raise RelayAuthError(f"wukongim api {method} {path} refused the manager token (401)")
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code != 200:
            detail = body.get("msg") if isinstance(body, dict) else response.text[:200]
            raise RelayError(f"wukongim api {method} {path} failed with {response.status_code}: {detail}")
        return body

    async def route(self, uid: str, *, secure: bool) -> str:
        """The address to connect to for ``uid``: wss, ws or tcp, in that order of preference."""
        body = await self._call("GET", "/route", params={"uid": uid})
        if not isinstance(body, dict):
            raise RelayError("wukongim api GET /route answered something other than an object")
        for key in ("wss_addr", "ws_addr") if secure else ("ws_addr", "wss_addr"):
            if body.get(key):
                return str(body[key])
        if body.get("tcp_addr"):
            return f"tcp://{body['tcp_addr']}"
        raise RelayError("wukongim api GET /route returned no address")

    async def sync(
        self, login_uid: str, peer_uid: str, start_seq: int, limit: int = SYNC_PAGE
    ) -> tuple[list[Message], bool]:
        """One page of the person channel ``login_uid``/``peer_uid`` from ``start_seq`` on (the
        last ``limit`` messages if ``start_seq`` is 0), and whether more follow."""
        body = await self._call(
            "POST",
            "/channel/messagesync",
            json={
                "login_uid": login_uid,
                "channel_id": peer_uid,
                "channel_type": ChannelType.PERSON,
                "start_message_seq": start_seq,
                "end_message_seq": 0,
                "limit": limit,
                "pull_mode": 1,  # upwards: newer messages
            },
        )
        try:
            messages = [_synced_message(item) for item in body.get("messages") or []]
            return messages, bool(body.get("more"))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise RelayError(f"wukongim api POST /channel/messagesync answered a malformed page: {exc!r}") from None

    async def set_token(self, uid: str, token: str, device_flag: int) -> None:
        """Register ``token`` for (``uid``, ``device_flag``) as a slave device (kicks nobody)."""
        body = await self._call(
            "POST", "/user/token", json={"uid": uid, "token": token, "device_flag": device_flag, "device_level": 0}
        )
        status = body.get("status") if isinstance(body, dict) else None
        if status not in (None, 200):  # a banned uid answers {"status": 19}
            raise RelayAuthError(f"wukongim refused to set the token of {uid!r}: status {status}")


def _synced_message(item: dict[str, Any]) -> Message:
    header = item.get("header") or {}
    flags = Flags.RED_DOT if header.get("red_dot") else Flags.NONE
    return Message(
        message_id=int(item["message_id"]),
        message_seq=int(item["message_seq"]),
        client_msg_no=str(item.get("client_msg_no") or ""),
        from_uid=str(item["from_uid"]),
        channel_id=str(item["from_uid"]),  # as a RECV shows a person message to its recipient
        channel_type=int(item["channel_type"]),
        timestamp=int(item.get("timestamp") or 0),
        payload=base64.b64decode(item.get("payload") or ""),
        flags=flags,
    )


class RelayLink:
    """The App user on the person channel, as a :class:`~lineup_plugin.ports.Link`.

    :meth:`send` queues for the relay's sender, which writes in order without waiting for one
    message's WuKongIM send acknowledgement before the next; an IM channel has nothing to close.
    :attr:`max_text` is the largest envelope text (UTF-8 bytes) one WuKongIM frame carries;
    :meth:`send` refuses more.
    With ``pairing_id`` the link is one paired App device (device ``wukongim:<uid>/<pairing id>``):
    what it sends is sealed for that device only, so each paired device is a device of its own
    for the hub (first answer wins, the others are told).
    """

    def __init__(self, relay: Relay, uid: str, pairing_id: str | None = None) -> None:
        self.relay = relay
        self.uid = uid
        self.pairing_id = pairing_id
        self.name = f"wukongim:{uid}" if pairing_id is None else f"wukongim:{uid}/{pairing_id}"
        #: the largest envelope text, in UTF-8 bytes, that fits one WuKongIM frame
        self.max_text: int = max_envelope_text(uid, relay.settings.content_type, sealed=relay.pairings is not None)

    def send(self, text: str) -> None:
        """Queue one encoded envelope for the App user.

        Raises TransportError when the queue is full, or at once, queueing nothing, when ``text``
        is larger than :attr:`max_text` (WuKongIM would refuse the frame).
        """
        if len(text) > self.max_text // 4 and (size := len(text.encode())) > self.max_text:
            raise TransportError(
                f"relay to {self.uid}: message of {size} bytes is too large for one WuKongIM frame "
                f"(at most {self.max_text} bytes of envelope JSON once encrypted into 1 MiB)"
            )
        self.relay.enqueue(self.uid, text, self.pairing_id)

    def close(self, code: int, reason: str) -> None:
        """Nothing to close on an IM channel: the App user is reached again when it next speaks."""
        log.info("relay link %s: %s (%d)", self.name, reason, code)


class _Seen:
    """A bounded set of recently seen keys."""

    def __init__(self, size: int = DEDUPE_WINDOW) -> None:
        self._keys: OrderedDict[Hashable, None] = OrderedDict()
        self._size = size

    def add(self, *keys: Hashable) -> bool:
        """Record ``keys``; return False if any of them was seen before."""
        fresh = not any(key in self._keys for key in keys)
        for key in keys:
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return fresh


def _log_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("lineup: the WuKongIM relay stopped: %s", task.exception())


class Relay:
    """Bridges the hub and the App user over WuKongIM. ``await run()``; ``await close()`` to stop."""

    def __init__(
        self,
        settings: WuKongIMSettings,
        hub: Hub,
        *,
        timers: Timers | None = None,
        pairings: Pairings | None = None,
        sync_every: float = SYNC_EVERY,
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.sync_every = sync_every
        # the sequence number up to which the channel was read by a check for unpushed messages
        self._checked_seq: int | None = None
        #: with pairings, envelopes travel end-to-end encrypted for the paired App devices only
        self.pairings = pairings
        self._app_tokens: set[str] = set()  # App tokens registered with WuKongIM by this process
        self._told: set[str] = set()  # pairing ids told they are refused
        self.link = RelayLink(self, settings.app_uid)
        #: cards as text, while the App user's client shows only text
        self.texts = TextClient(
            settings.text_cards,
            hub=hub,
            link=self.link,
            uid=settings.app_uid,
            max_text=self.link.max_text,
            content_type=settings.content_type,
            send_text=self.send_text,
        )
        self._outbox: asyncio.Queue[tuple[str, str, str | None]] = asyncio.Queue(OUTBOX_LIMIT)
        #: one link per paired App device (with pairings), by pairing id
        self._device_links: dict[str, RelayLink] = {}
        self.connected = asyncio.Event()
        token = settings.token or (secrets.token_urlsafe(24) if settings.manager_token else "")
        self.options = ClientOptions(
            uid=settings.uid,
            token=token,
            device_flag=DeviceFlag(settings.device_flag),
            protocol_version=settings.protocol_version,
            timers=timers or Timers(),
        )
        headers = {"token": settings.manager_token} if settings.manager_token else {}
        self._http = httpx.AsyncClient(
            base_url=settings.api_url, headers=headers, timeout=self.options.timers.send_timeout
        )
        self._api = WuKongIMApi(self._http)
        self._token_registered = False
        self._attached: set[RelayLink] = set()
        #: the paired devices told which calls this start closed (once each)
        self._told_restart: set[str] = set()
        self._missed = False
        # Highest sequence number received on the App's channel. Our own sends do not move it: a
        # message of the App's stored just before one of ours may not have reached us yet.
        self._last_seq: int | None = None
        self._seen = _Seen()
        self._task: asyncio.Task[None] | None = None
        self.client = WuKongIMClient(self.options, self._address, self._on_message, on_state=self._on_state)

    def credential(self, device_id: str) -> str | None:
        """What admits ``device_id`` now (Web Push keeps a subscription while it stays the same): a
        paired device's pairing (None once it is revoked), the App user's uid for the plain link."""
        prefix = f"wukongim:{self.settings.app_uid}"
        if device_id == prefix:
            return prefix
        pairing_id = device_id.removeprefix(prefix + "/")
        paired = pairing_id != device_id and self.pairings is not None and self.pairings.channel(pairing_id) is not None
        return f"pairing:{pairing_id}" if paired else None

    async def run(self) -> None:
        """Stay connected until :meth:`close`; raises RelayAuthError if the login is refused."""
        self._expect_devices()
        if self.hub.push is not None:
            self.hub.push.vouch("relay", self.credential)
        sender = asyncio.create_task(self._send_queued(), name="lineup-relay-sender")
        checker = asyncio.create_task(self._check(), name="lineup-relay-check")
        try:
            await self.client.run()
        finally:
            sender.cancel()
            checker.cancel()
            await asyncio.gather(sender, checker, return_exceptions=True)
            await self.detach()
            await self._http.aclose()
            if self.pairings is not None:
                self.pairings.keep_floors(now=True)

    async def close(self) -> None:
        """Disconnect; :meth:`run` returns."""
        await self.client.close()

    async def __aenter__(self) -> Relay:
        """Start :meth:`run` in a task of its own; leaving the block closes the relay and waits for it."""
        self._expect_devices()
        self._task = asyncio.create_task(self.run(), name="lineup-relay")
        self._task.add_done_callback(_log_end)
        return self

    def _expect_devices(self) -> None:
        """Until the IM connection is up (one connect timeout at most), a call waits for the devices
        it will attach rather than fail ``no_app``: there are some (paired, or the App user's link)."""
        if self.connected.is_set():
            return
        plain = self.pairings is None or self.settings.text_cards != "never"
        if plain or (self.pairings is not None and self.pairings.channels()):
            self.hub.expect_device(self.options.timers.connect_timeout)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
        if self._task is not None:
            await asyncio.wait([self._task])

    def describe(self) -> str:
        """Relay mode: the WuKongIM server, the agent's uid and the App user's."""
        s = self.settings
        return f"relay mode: WuKongIM {s.api_url} as uid {s.uid!r}, for App user {s.app_uid!r}"

    @property
    def connect_link(self) -> str | None:
        """None: a relay App is configured with its WuKongIM account, not opened from a link."""
        return None

    def enqueue(self, uid: str, text: str, pairing_id: str | None = None) -> None:
        """Queue one encoded envelope for ``uid`` (for its paired device ``pairing_id``); sent in order."""
        try:
            self._outbox.put_nowait((uid, text, pairing_id))
        except asyncio.QueueFull:
            self._missed = True  # re-sync the App (live calls re-sent) once WuKongIM takes messages again
            raise TransportError(f"relay to {uid}: {OUTBOX_LIMIT} messages wait for WuKongIM") from None

    async def _send_queued(self) -> None:
        """Write what the hub queued, in order, without waiting for each SENDACK before the next
        message (a call's verdict and the next call leave back to back); :meth:`_settle` waits
        for the SENDACKs. At most :data:`SEND_WINDOW` messages wait for theirs at once."""
        window = asyncio.Semaphore(SEND_WINDOW)
        acks: asyncio.Queue[tuple[str, Coroutine[None, None, SendAck]]] = asyncio.Queue()
        settler = asyncio.create_task(self._settle(acks, window), name="lineup-relay-sendacks")
        try:
            while True:
                uid, text, pairing_id = await self._outbox.get()
                try:
                    if pairing_id is None and await self.texts.wanted():  # a client that shows only text
                        await self.texts.send(uid, text)  # the envelope said in words
                        continue
                    await window.acquire()
                    try:
                        written = await self.submit_envelope(uid, text, pairing_id)
                    except BaseException:
                        window.release()
                        raise
                    if written is None:
                        window.release()
                    else:
                        acks.put_nowait((uid, written))
                except RelayError as exc:
                    log.info("relay send to %s failed: %s", uid, exc)
                except Exception:  # a bug must cost one message, never the sender (the queue would stall)
                    self._missed = True
                    log.exception("relay sender failed on a message to %s", uid)
        finally:
            settler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await settler
            while not acks.empty():  # the relay stops: nothing waits for these any more
                acks.get_nowait()[1].close()

    async def _settle(
        self, acks: asyncio.Queue[tuple[str, Coroutine[None, None, SendAck]]], window: asyncio.Semaphore
    ) -> None:
        """Wait for the SENDACK of every message written, in order; one refused or never
        acknowledged makes the App re-sync once the relay is back (live calls sent again)."""
        while True:
            uid, acked = await acks.get()
            try:
                await acked
            except RelayError as exc:
                self._missed = True
                log.info("relay send to %s failed: %s", uid, exc)
            except Exception:
                self._missed = True
                log.exception("relay sender failed on a message to %s", uid)
            finally:
                window.release()

    async def submit_envelope(
        self, uid: str, text: str, pairing_id: str | None = None
    ) -> Coroutine[None, None, SendAck] | None:
        """Write one encoded envelope to ``uid`` as LineUp custom content; returns what waits for
        its SENDACK (see :meth:`ImSession.submit <lineup_plugin.transports.wukongim.client.ImSession.submit>`),
        or None when nothing was written.

        With pairings it is sealed for the device ``pairing_id``; nothing goes in clear (the plain
        link of the App user gets cards in text, or nothing once a LineUp client spoke: paired
        devices have links of their own), and a device no longer paired gets nothing.
        """
        content_type = self.settings.content_type
        if self.pairings is None:
            payload = wrap_envelope(text, content_type)
        else:
            channel = self.pairings.channel(pairing_id) if pairing_id is not None else None
            sealed = channel.seal(text, content_type) if channel is not None else None
            self.pairings.keep_floors()
            if sealed is None:
                log.debug("relay: no paired App device %r to send to", pairing_id)
                return None
            payload = sealed
        try:
            return await self.client.submit(uid, ChannelType.PERSON, payload)
        except RelayError:
            self._missed = True  # re-sync the App (live calls re-sent) once we are back
            raise

    async def send_text(self, uid: str, text: str) -> None:
        """Send ``text`` to ``uid`` as a WuKongIM text message."""
        try:
            await self.client.send(uid, ChannelType.PERSON, text_payload(text))
        except RelayError:
            self._missed = True  # re-sync the App (its open card asked again) once we are back
            raise

    # -- connection state ----------------------------------------------------------------------

    async def _address(self) -> str:
        if self.settings.manager_token and not self._token_registered:
            await self._api.set_token(self.options.uid, self.options.token, self.options.device_flag)
            self._token_registered = True
        if self.settings.ws_url:
            return self.settings.ws_url
        return await self._api.route(self.options.uid, secure=self.settings.api_url.startswith("https:"))

    async def _on_state(self, up: bool) -> None:
        if not up:
            self.connected.clear()
            return
        first = self._last_seq is None
        if first:  # where the channel stands, noted before anything is sent: the App's answers come after it
            await self._catch_up()
        self.connected.set()
        resync, self._missed = self._missed, False
        # With pairing, each paired device is a link of its own; the App user's plain link (a stock
        # client answered in text) too unless text_cards is never: then, with no device paired,
        # nobody is attached and a call fails no_app rather than wait for nobody.
        if self.pairings is None or self.settings.text_cards != "never":
            await self.attach(resync=resync)
        if self.pairings is not None:
            await self.attach_paired(resync=resync)
        self.hub.expect_device(0)  # whoever is attached now is: a call with nobody fails no_app
        if not first:
            await self._catch_up()

    async def _check(self) -> None:
        """While connected: a revocation made by ``lineup pair --revoke`` detaches the devices it
        dropped (a new call then fails ``no_app``), and every :attr:`sync_every` seconds while a
        call is open or messages came, what WuKongIM stored but never pushed is fetched."""
        synced = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(CHECK_EVERY)
            if not self.connected.is_set():
                continue
            try:
                if self.pairings is not None:
                    paired = {channel.pairing_id for channel in self.pairings.channels()}
                    if paired != {link.pairing_id for link in self._attached if link.pairing_id is not None}:
                        await self.attach_paired()
                now = asyncio.get_running_loop().time()
                pushed = self._checked_seq is not None and (self._last_seq or 0) > self._checked_seq
                if now - synced >= self.sync_every and (pushed or self.hub.session.calls.all()):
                    synced = now
                    await self._fetch_unpushed()
            except Exception:  # a damaged pairing file, a bug: logged, and the next look comes all the same
                log.exception("lineup: the relay's look at the pairing file and the channel failed")
                await asyncio.sleep(self.sync_every)  # not a log line every half second

    async def _fetch_unpushed(self) -> None:
        """Handle what the App user sent since the last check that never reached us (already seen: dropped)."""
        if self._checked_seq is None:
            return

        def checked(message_seq: int) -> None:
            self._checked_seq = max(self._checked_seq or 0, message_seq)

        def failed(exc: RelayError) -> None:
            log.info("cannot look for messages WuKongIM did not push: %s", exc)

        await self._pull(lambda: self._checked_seq or 0, checked, failed)

    async def _pull(
        self, after: Callable[[], int], seen: Callable[[int], None], failed: Callable[[RelayError], None]
    ) -> None:
        """Handle every message of the App's channel past ``after()``, page by page; ``seen`` notes each
        one's seq (moving ``after``); ``failed`` says why the channel could not be read."""
        while True:
            start = after()
            try:
                messages, more = await self._api.sync(self.options.uid, self.settings.app_uid, start + 1)
            except RelayError as exc:
                failed(exc)
                return
            for message in messages:
                await self._on_message(message)
                seen(message.message_seq)
            if not more or after() == start:
                return

    def _saw(self, message_seq: int) -> None:
        if self._last_seq is not None:  # else the first catch-up has yet to note where we start
            self._last_seq = max(self._last_seq, message_seq)

    async def _catch_up(self) -> None:
        """Handle what the App user sent while we were away.

        The first connection only notes where the channel stands: what was sent before the
        agent started is not replayed (the hub ends calls of a previous process anyway).
        """
        if self._last_seq is None:
            try:
                last, _ = await self._api.sync(self.options.uid, self.settings.app_uid, 0, limit=SYNC_PAGE)
            except RelayError as exc:
                log.warning("cannot read where the App's channel stands: %s", exc)
                await self.texts.recall([])
                return
            await self.texts.recall(last)  # a LineUp App that spoke before the agent started
            self._last_seq = self._checked_seq = max((m.message_seq for m in last), default=0)
            return

        def failed(exc: RelayError) -> None:
            log.warning("cannot catch up with messages sent while disconnected: %s", exc)

        await self._pull(lambda: self._last_seq or 0, self._saw, failed)

    async def attach(self, *, resync: bool = False, link: RelayLink | None = None) -> None:
        """Attach the App user (or one paired device, ``link``) to the hub: the IM login vouches for
        it; again, re-sending live calls, on ``resync``."""
        link = link or self.link
        if link in self._attached:
            if not resync:
                return
            await self.hub.disconnect(link)
        self._attached.add(link)
        self.hub.connect(link, device_id=link.name)
        if link.pairing_id is not None and link.pairing_id not in self._told_restart:
            self._told_restart.add(link.pairing_id)
            self._tell_restart(link)

    def _tell_restart(self, link: RelayLink) -> None:
        """Tell a paired device, once, which calls closed as this agent started (left by one that was
        killed): its IM connection stayed up, so it will not say hello to ask."""
        for call in self.hub.recovered:
            self.hub.reply(link, ToolCancel(call_id=call.call_id, reason=closed_reason(call)))

    def device_link(self, pairing_id: str) -> RelayLink:
        """The link of the paired device ``pairing_id``."""
        link = self._device_links.get(pairing_id)
        if link is None:
            link = self._device_links[pairing_id] = RelayLink(self, self.settings.app_uid, pairing_id)
        return link

    async def attach_paired(self, *, resync: bool = False) -> None:
        """Attach every paired device and detach the links of devices no longer paired."""
        assert self.pairings is not None
        paired = {channel.pairing_id for channel in self.pairings.channels()}
        if paired:  # pairing declares a LineUp client: no card goes as text (in clear) to this user
            self.texts.declare()
        for pairing_id, link in list(self._device_links.items()):
            if pairing_id not in paired:
                await self.detach(link)
                del self._device_links[pairing_id]
        for pairing_id in sorted(paired):
            await self.attach(resync=resync, link=self.device_link(pairing_id))

    async def detach(self, link: RelayLink | None = None) -> None:
        """Detach ``link`` from the hub, if attached (None: every link of the relay)."""
        for each in [link] if link is not None else list(self._attached):
            if each in self._attached:
                self._attached.discard(each)
                await self.hub.disconnect(each)

    # -- incoming --------------------------------------------------------------------------------

    async def _on_message(self, message: Message) -> None:
        if message.channel_type == ChannelType.PERSON and message.channel_id == self.settings.app_uid:
            self._saw(message.message_seq)
        if message.channel_type != ChannelType.PERSON or message.from_uid != self.settings.app_uid:
            log.info("ignoring wukongim message %d from %r", message.message_id, message.from_uid)
            return
        if not self._seen.add(("id", message.message_id), ("no", message.client_msg_no)):
            log.debug("dropping re-delivered wukongim message %d", message.message_id)
            return
        try:
            content = json.loads(message.payload)
        except ValueError:
            log.warning("ignoring wukongim message %d: payload is not json", message.message_id)
            return
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == self.settings.content_type and self.pairings is not None:
            await self._on_sealed(content.get("e2e"), message)
        elif kind == self.settings.content_type:
            await self._on_envelope(content.get("envelope"), message)
        elif kind == TEXT_CONTENT_TYPE and isinstance(content.get("content"), str):
            await self._on_text(content["content"], message)
        else:
            log.info("ignoring wukongim message %d of content type %r", message.message_id, kind)

    async def _on_envelope(self, data: Any, message: Message, link: RelayLink | None = None) -> None:
        if not isinstance(data, dict):
            log.warning("ignoring wukongim message %d: no envelope object", message.message_id)
            return
        envelope_id = data.get("id")
        if isinstance(envelope_id, str) and not self._seen.add(("envelope", envelope_id)):
            log.debug("dropping re-delivered envelope %s", envelope_id)
            return
        self.texts.declare()  # the App user's client speaks LineUp: cards go as envelopes
        link = link or self.link
        await self.attach(link=link)
        await self.hub.receive_object(link, data)  # a hello re-syncs the App; bad input is answered

    async def _on_sealed(self, box: Any, message: Message) -> None:
        """An envelope sealed end to end: opened with its pairing's keys, or refused (and the App told why)."""
        assert self.pairings is not None
        if not isinstance(box, dict):
            log.warning(
                "refused wukongim message %d: an envelope in clear (this agent requires e2e)", message.message_id
            )
            return
        pairing_id = box.get("p")
        channel = self.pairings.channel(pairing_id) if isinstance(pairing_id, str) else None
        if channel is None:
            revoked = isinstance(pairing_id, str) and self.pairings.revoked(pairing_id)
            log.warning(
                "refused wukongim message %d: pairing %r is %s",
                message.message_id,
                pairing_id,
                "revoked" if revoked else "unknown",
            )
            await self._refuse(str(pairing_id), "pairing_revoked" if revoked else "not_paired")
            await self.attach_paired()  # a revoked device is detached: its calls are not sent to nobody
            return
        try:
            data = json.loads(channel.open(box))
        except (RelayProtocolError, ValueError) as exc:
            log.warning("refused wukongim message %d: %s", message.message_id, exc)
            return
        self.pairings.keep_floors()
        await self._on_envelope(data, message, self.device_link(channel.pairing_id))

    async def _refuse(self, pairing_id: str, code: str) -> None:
        """Tell a refused App, in clear and once per process, why nothing it sends is read."""
        if pairing_id in self._told or len(self._told) > DEDUPE_WINDOW:
            return
        self._told.add(pairing_id)
        notice = {
            "type": self.settings.content_type,
            "refused": {
                "code": code,
                "pairing": pairing_id,
                "message": REVOKED if code == "pairing_revoked" else NOT_PAIRED,
            },
        }
        with contextlib.suppress(RelayError):
            await self.client.send(self.settings.app_uid, ChannelType.PERSON, json.dumps(notice).encode())

    # -- pairing ---------------------------------------------------------------------------------

    async def app_ws_url(self) -> str:
        """The WuKongIM WebSocket address the App logs in to (``app_ws_url``, ``ws_url``, else GET /route)."""
        s = self.settings
        if s.app_ws_url or s.ws_url:
            return str(s.app_ws_url or s.ws_url)
        return await self._api.route(s.app_uid, secure=s.api_url.startswith("https:"))

    async def register_app_token(self, token: str) -> None:
        """Register the App user's ``token`` with WuKongIM (needs the manager token; else nothing to do)."""
        if self.settings.manager_token and token not in self._app_tokens:
            await self._api.set_token(self.settings.app_uid, token, APP_DEVICE_FLAG)
            self._app_tokens.add(token)

    async def pair(self, app_key: str) -> dict[str, Any]:
        """Pair the App device with public key ``app_key``: what it keeps to use the relay (see Pairings.offer)."""
        if self.pairings is None:
            raise RelayError("pairing is off (wukongim.e2e: false)")
        state, device = self.pairings.pair(app_key)
        await self.register_app_token(state.app_token)
        offer = self.pairings.offer(state, device, await self.app_ws_url(), self.settings.content_type)
        if self.connected.is_set():
            await self.attach_paired()
        return offer

    async def _on_text(self, text: str, message: Message) -> None:
        await self.attach()
        if self.texts.active and await self.texts.reply(text, message):
            return  # an answer to the card the user is asked in text
        try:
            payload = Text(text=text)
        except ValueError as exc:  # pydantic's ValidationError, e.g. a text over the size limit
            log.warning("ignoring text message %d: %s", message.message_id, exc)
            return
        envelope = codec.envelope(
            payload,
            sender=Actor(kind="human", id=message.from_uid),
            target=self.hub.agent,
            conversation_id=self.hub.conversation_id,
            id=f"wukongim_{message.message_id}",
        )
        await self.hub.handle(self.link, envelope)
