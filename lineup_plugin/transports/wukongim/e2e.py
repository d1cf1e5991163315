"""End-to-end encryption of LineUp envelopes over the relay. No I/O.

The WuKongIM server decrypts every payload it receives (its own transport encryption ends at the
server) and stores it. So between the agent and a paired App each envelope is sealed again, with
keys the server never sees:

* keys: at pairing the agent (one X25519 key pair, :class:`AgentKey`) and the App device (its own
  pair) exchange public keys; ``HKDF-SHA256(X25519 secret, salt=pairing id, info="lineup-e2e-v1")``
  gives 64 bytes: the agent→App key, then the App→agent key (AES-256-GCM each);
* a sealed message is the IM payload ``{"type": <content type>, "e2e": {"v": 1, "p": <pairing id>,
  "n": <counter>, "iv": <12 random bytes>, "c": <ciphertext + tag>}}`` (bytes as unpadded
  base64url); the additional data binds the pairing, the sender's and the receiver's uids and the
  counter: ``lineup-e2e-v1|<pairing id>|<from uid>|<to uid>|<counter>``, so a message cannot be
  moved to another pair of users, another pairing or another counter;
* replay: the counter is the sender's clock in microseconds, strictly increasing; a receiver
  refuses a counter it has seen among the last :data:`WINDOW` ones or one at or below the floor
  (the highest counter that left the window); across restarts the floor is the highest counter
  accepted before.

The App does the same with the noble primitives (``lineup_plugin/app/e2e.js``): WebCrypto does not
exist on a page served over plain ``http://`` from a LAN address (not a secure context).
"""

from __future__ import annotations

import base64
import bisect
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from lineup_plugin.errors import RelayProtocolError

VERSION = 1
INFO = b"lineup-e2e-v1"
#: how many recent counters a receiver remembers (older ones must be above the floor)
WINDOW = 1024
IV_BYTES = 12


def b64url(data: bytes) -> str:
    """Unpadded base64url, as the App writes bytes."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def from_b64url(text: Any, what: str, size: int | None = None) -> bytes:
    """The bytes of unpadded base64url ``text``; RelayProtocolError naming ``what`` when it is not that."""
    if not isinstance(text, str) or len(text) > 2_000_000:
        raise RelayProtocolError(f"e2e: {what} is not a base64url string")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise RelayProtocolError(f"e2e: {what} is not base64url") from None
    if size is not None and len(data) != size:
        raise RelayProtocolError(f"e2e: {what} must be {size} bytes, not {len(data)}")
    return data


def aad(pairing_id: str, from_uid: str, to_uid: str, counter: int) -> bytes:
    """The additional authenticated data of one sealed message."""
    return f"lineup-e2e-v1|{pairing_id}|{from_uid}|{to_uid}|{counter}".encode()


class AgentKey:
    """The agent's X25519 key pair (kept in the pairing file)."""

    def __init__(self, private: X25519PrivateKey | None = None) -> None:
        self.private = private or X25519PrivateKey.generate()

    @classmethod
    def load(cls, text: str) -> AgentKey:
        """The key pair of a stored private key (base64url of 32 raw bytes)."""
        return cls(X25519PrivateKey.from_private_bytes(from_b64url(text, "the agent key", 32)))

    def dump(self) -> str:
        """The private key as stored (base64url)."""
        return b64url(self.private.private_bytes_raw())

    @property
    def public(self) -> str:
        """The public key as the App gets it (base64url)."""
        return b64url(self.private.public_key().public_bytes_raw())


def derive(private: X25519PrivateKey, peer_public: str, pairing_id: str) -> tuple[bytes, bytes]:
    """The (agent→App, App→agent) AES-256 keys of one pairing (the same from either end)."""
    peer = X25519PublicKey.from_public_bytes(from_b64url(peer_public, "the peer's public key", 32))
    shared = private.exchange(peer)
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=pairing_id.encode(), info=INFO).derive(shared)
    return okm[:32], okm[32:]


@dataclass
class ReplayWindow:
    """The counters a receiver accepted lately, and the floor below which it accepts none."""

    floor: int = 0
    recent: list[int] = field(default_factory=list)

    @property
    def highest(self) -> int:
        """The highest counter accepted (or the floor)."""
        return self.recent[-1] if self.recent else self.floor

    def check(self, counter: int) -> None:
        """Raise RelayProtocolError if ``counter`` was seen or is too old; else record it."""
        if counter <= self.floor:
            raise RelayProtocolError(f"e2e: replayed or too old message (counter {counter} <= {self.floor})")
        at = bisect.bisect_left(self.recent, counter)
        if at < len(self.recent) and self.recent[at] == counter:
            raise RelayProtocolError(f"e2e: replayed message (counter {counter} seen before)")
        self.recent.insert(at, counter)
        if len(self.recent) > WINDOW:
            self.floor = self.recent.pop(0)


class Channel:
    """One pairing seen from one end: seals what it sends, opens what it receives.

    The agent's end is ``Channel(agent_key, app_public, pairing_id, agent_uid, app_uid)``;
    :meth:`for_app` makes the App's end (the benchmarks' App, tests). ``floor`` is the replay floor
    kept from a previous run (see :class:`ReplayWindow`).
    """

    def __init__(
        self,
        key: AgentKey,
        app_public: str,
        pairing_id: str,
        agent_uid: str,
        app_uid: str,
        *,
        floor: int = 0,
        sent: int = 0,
    ) -> None:
        to_app, to_agent = derive(key.private, app_public, pairing_id)
        self._setup(to_app, to_agent, pairing_id, agent_uid, app_uid, floor)
        self.sent = sent

    @classmethod
    def for_app(cls, app_secret: str, agent_public: str, pairing_id: str, app_uid: str, agent_uid: str) -> Channel:
        """The App's end of a pairing, from its private key and the agent's public key."""
        channel = cls.__new__(cls)
        private = X25519PrivateKey.from_private_bytes(from_b64url(app_secret, "the App secret", 32))
        to_app, to_agent = derive(private, agent_public, pairing_id)
        channel._setup(to_agent, to_app, pairing_id, app_uid, agent_uid, 0)
        return channel

    def _setup(self, send_key: bytes, recv_key: bytes, pairing_id: str, me: str, peer: str, floor: int) -> None:
        self._send = AESGCM(send_key)
        self._recv = AESGCM(recv_key)
        self.pairing_id = pairing_id
        self.me = me
        self.peer = peer
        self.window = ReplayWindow(floor)
        #: the last counter sent: never reused, even if the clock goes back (kept across restarts)
        self.sent = 0

    def _next_counter(self) -> int:
        self.sent = max(self.sent + 1, time.time_ns() // 1000)
        return self.sent

    def seal(self, text: str, content_type: int) -> bytes:
        """The IM payload carrying envelope ``text`` sealed for the other end."""
        counter = self._next_counter()
        iv = secrets.token_bytes(IV_BYTES)
        sealed = self._send.encrypt(iv, text.encode(), aad(self.pairing_id, self.me, self.peer, counter))
        box = {"v": VERSION, "p": self.pairing_id, "n": counter, "iv": b64url(iv), "c": b64url(sealed)}
        return json.dumps({"type": content_type, "e2e": box}, separators=(",", ":")).encode()

    def open(self, box: dict[str, Any]) -> str:
        """The envelope text of a sealed message from the other end; RelayProtocolError if tampered or replayed."""
        counter = box.get("n")
        if box.get("v") != VERSION or not isinstance(counter, int) or isinstance(counter, bool) or counter < 0:
            raise RelayProtocolError("e2e: unknown version or bad counter")
        iv = from_b64url(box.get("iv"), "iv", IV_BYTES)
        sealed = from_b64url(box.get("c"), "ciphertext")
        try:
            plain = self._recv.decrypt(iv, sealed, aad(self.pairing_id, self.peer, self.me, counter))
        except InvalidTag:
            raise RelayProtocolError("e2e: message does not authenticate (tampered, or another key)") from None
        self.window.check(counter)  # only once it authenticates: forged counters move nothing
        try:
            return plain.decode()
        except UnicodeDecodeError:
            raise RelayProtocolError("e2e: the sealed envelope is not UTF-8") from None
