"""One Web Push, sans I/O: what it says, how it is sealed, and what the push service's answer means.

* :class:`Subscription` is what the App's ``PushSubscription.toJSON()`` holds: the push service's
  endpoint and the browser's keys (``p256dh``, ``auth``), read and checked by
  :meth:`Subscription.from_json` alone.
* :func:`card_notice` / :func:`closed_notice` are the plaintext: which card waits (the tool and its
  question; with ``preview`` off only the call id, and the App shows "A card is waiting"), or which
  card's notification to close. Padded with spaces to :data:`PADDED_SIZE` bytes, so every push —
  short question, long one, or a close — has the same length on the wire.
* :func:`push_request` seals it for the subscription (RFC 8291 ``aes128gcm`` through http-ece, a
  fresh key and salt each time) and adds the headers of RFC 8030 (``TTL``, ``Urgency``, ``Topic``)
  and the VAPID ``Authorization`` (RFC 8292). The push service sees the endpoint, the headers and
  ciphertext only.
* :func:`outcome` reads the service's answer: delivered, gone (404/410: drop the subscription),
  try again after ``Retry-After`` (429, 503), or failed.

Nothing here reads a clock or opens a socket: the caller passes ``now``.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import http_ece
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import ProtocolError, PushError, PushServiceNotAllowed
from ..protocol.base import validate
from ..protocol.messages import WebPushSubscription
from .services import PUSH_SERVICES
from .vapid import VapidKey, b64url

#: the plaintext of every push is padded to this many bytes (the ciphertext is 103 bytes more)
PADDED_SIZE = 1024
#: the longest question a push carries (it is cut, with an ellipsis, beyond)
MAX_TEXT = 300
#: how long a push service keeps a close notice for a device that is offline (seconds)
CLOSE_TTL = 24 * 3600
#: the longest wait a ``Retry-After`` may ask for (seconds); a longer one is cut to this
MAX_RETRY_AFTER = 3600.0
#: the wait when a 429 or 503 names none
DEFAULT_RETRY_AFTER = 60.0
#: the arguments that hold a card's question, in the order they are looked for
QUESTION_KEYS = ("question", "message", "prompt", "title")

#: push services whose browsers revoke a subscription after a few pushes that show no notification
#: (Apple's: WebKit counts a push that only closes one as such): no close is sent to them
SILENT_PUSH_PUNISHED = ("push.apple.com",)

Urgency = Literal["very-low", "low", "normal", "high"]


def _b64url_decode(value: str, what: str, size: int) -> bytes:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise PushError(f"push subscription: {what} is not base64url") from None
    if len(raw) != size:
        raise PushError(f"push subscription: {what} must be {size} bytes, not {len(raw)}")
    return raw


#: the hosts a push service may be reached at over plain ``http://`` (one on this machine)
LOCAL_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


@dataclass(frozen=True)
class Subscription:
    """A browser's push subscription: where to post, and the keys to seal for (both base64url)."""

    endpoint: str
    p256dh: str
    auth: str

    @classmethod
    def from_json(cls, data: Any, services: Sequence[str] = PUSH_SERVICES) -> Subscription:
        """The subscription ``data`` holds (``PushSubscription.toJSON()``: an App's ``push.subscribe``, or
        an entry of the subscriptions file), or PushError saying what is wrong. The one place that reads one.

        Its shape is the wire's :class:`~lineup_plugin.protocol.messages.WebPushSubscription` (an
        endpoint of at most :data:`~lineup_plugin.protocol.messages.MAX_ENDPOINT` characters, the
        two keys as strings). The endpoint must be ``https://`` on one of ``services`` (so an App
        cannot make the agent post to any address it likes; ``http://`` only on a loopback address
        listed there, for a local push service); ``p256dh`` a P-256 point (65 bytes), ``auth`` 16 bytes.
        """
        try:
            shape: WebPushSubscription = validate(WebPushSubscription, data)
        except ProtocolError as exc:
            raise PushError(f"push subscription: {exc}") from None
        endpoint, p256dh, auth = shape.endpoint, shape.keys.p256dh, shape.keys.auth
        try:
            parts = urlsplit(endpoint)
            host = parts.hostname or ""
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise PushError("push subscription: the endpoint is not a URL") from None
        if not host or parts.username is not None or parts.password is not None or "[" in host:
            raise PushError("push subscription: the endpoint must be https://host/...")
        if parts.scheme != "https" and not (parts.scheme == "http" and host in LOCAL_HOSTS):
            raise PushError("push subscription: the endpoint must be an https:// address")
        if not any(host == service or host.endswith("." + service) for service in services):
            raise PushServiceNotAllowed(
                f"push subscription: {host} is not a known push service; add it to the push_services setting"
            )
        if not endpoint.isascii() or any(ch.isspace() or ord(ch) < 32 for ch in endpoint):
            raise PushError("push subscription: the endpoint must be plain ASCII with no blanks or control characters")
        point = _b64url_decode(p256dh, "p256dh", 65)
        try:
            ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        except ValueError:
            raise PushError("push subscription: p256dh is not a P-256 public key") from None
        _b64url_decode(auth, "auth", 16)
        return cls(endpoint, p256dh, auth)

    def as_json(self) -> dict[str, Any]:
        """The subscription as ``PushSubscription.toJSON()`` writes it."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}


def closes_allowed(endpoint: str) -> bool:
    """Whether a close (a push that shows nothing) may go to ``endpoint``'s push service."""
    host = (urlsplit(endpoint).hostname or "").lower()
    return not any(host == service or host.endswith("." + service) for service in SILENT_PUSH_PUNISHED)


@dataclass(frozen=True)
class PushRequest:
    """An HTTP ``POST`` to a push service, ready to send."""

    url: str
    headers: dict[str, str]
    body: bytes
    #: the call the push is about, and whether it announces the card or closes its notification
    call_id: str
    kind: Literal["card", "closed"]


def topic(call_id: str) -> str:
    """The ``Topic`` of every push about ``call_id``: 32 URL-safe characters that do not reveal it.

    A push service keeps one undelivered message per topic, so a close replaces the card's push
    if the device has not fetched it yet.
    """
    return b64url(hashlib.sha256(b"lineup-push\0" + call_id.encode("utf-8", "surrogatepass")).digest())[:32]


def question(arguments: dict[str, Any]) -> str:
    """A card's question from its arguments (``question``, ``message``, ``prompt`` or ``title``), or ""."""
    for key in QUESTION_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            text = " ".join(value.split())
            return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"
    return ""


def _json(notice: dict[str, Any]) -> bytes:
    return json.dumps(notice, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")


def _padded(notice: dict[str, Any]) -> bytes:
    """``notice`` as JSON padded with spaces to :data:`PADDED_SIZE` bytes (its text cut to fit)."""
    body = _json(notice)
    text = notice.get("text")
    while len(body) > PADDED_SIZE and isinstance(text, str) and text:
        over = len(body) - PADDED_SIZE  # bytes; every character cut frees at least one
        text = text[: len(text) - over - 1] + "…" if len(text) > over + 1 else ""
        notice = {**notice, "text": text}
        body = _json(notice)
    if len(body) > PADDED_SIZE:
        raise PushError(f"a push notice of {len(body)} bytes does not fit in {PADDED_SIZE}")
    return body + b" " * (PADDED_SIZE - len(body))


def card_notice(
    call_id: str, name: str, arguments: dict[str, Any], *, conversation_id: str | None, preview: bool
) -> bytes:
    """The padded plaintext announcing a waiting card (with ``preview`` off: only which call)."""
    notice: dict[str, Any] = {"v": 1, "kind": "card", "call_id": call_id}
    if preview:
        notice.update(tool=name, text=question(arguments))
    if conversation_id:
        notice["conversation_id"] = conversation_id
    return _padded(notice)


def closed_notice(call_id: str) -> bytes:
    """The padded plaintext that closes the notification of ``call_id`` (answered, cancelled or expired)."""
    return _padded({"v": 1, "kind": "closed", "call_id": call_id})


def seal(plaintext: bytes, subscription: Subscription) -> bytes:
    """``plaintext`` encrypted to the subscription (RFC 8291, ``aes128gcm``; a new key and salt each time)."""
    receiver = _b64url_decode(subscription.p256dh, "p256dh", 65)
    auth = _b64url_decode(subscription.auth, "auth", 16)
    sender = ec.generate_private_key(ec.SECP256R1())
    sealed: bytes = http_ece.encrypt(
        plaintext, salt=os.urandom(16), private_key=sender, dh=receiver, auth_secret=auth, version="aes128gcm"
    )
    return sealed


def push_request(
    subscription: Subscription,
    plaintext: bytes,
    *,
    call_id: str,
    kind: Literal["card", "closed"],
    vapid: VapidKey,
    contact: str,
    now: float,
    ttl: float,
    urgency: Urgency,
) -> PushRequest:
    """The sealed, signed ``POST`` of ``plaintext`` to ``subscription`` (``TTL`` in whole seconds, at least 0)."""
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "aes128gcm",
        "TTL": str(max(0, int(ttl))),
        "Urgency": urgency,
        "Topic": topic(call_id),
        "Authorization": vapid.authorization(subscription.endpoint, contact, now),
    }
    return PushRequest(subscription.endpoint, headers, seal(plaintext, subscription), call_id, kind)


@dataclass(frozen=True)
class Delivered:
    """The push service took the push (201)."""


@dataclass(frozen=True)
class Gone:
    """The subscription no longer exists (404, 410): forget it."""

    status: int


@dataclass(frozen=True)
class RetryAfter:
    """The push service asks to wait (429, or 503 naming a time): try again ``seconds`` from now."""

    seconds: float


@dataclass(frozen=True)
class Failed:
    """The push service refused the push for another reason (``why``: status and what it said)."""

    why: str


Outcome = Delivered | Gone | RetryAfter | Failed


def retry_after(value: str | None, now: float) -> float:
    """Seconds to wait by a ``Retry-After`` header (seconds, or an HTTP date), within [0, MAX_RETRY_AFTER]."""
    if value is None or not value.strip():
        return DEFAULT_RETRY_AFTER
    value = value.strip()
    if value.isdigit():
        seconds = float(value[:9])
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return DEFAULT_RETRY_AFTER
        seconds = when.timestamp() - now if when.tzinfo is not None else DEFAULT_RETRY_AFTER
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def outcome(status: int, headers: dict[str, str], body: bytes, now: float) -> Outcome:
    """What a push service's answer means (``headers`` with lower-case names)."""
    if 200 <= status < 300:
        return Delivered()
    if status in (404, 410):
        return Gone(status)
    if status == 429 or (status == 503 and "retry-after" in headers):
        return RetryAfter(retry_after(headers.get("retry-after"), now))
    said = body[:200].decode("utf-8", "replace").strip()
    return Failed(f"{status} {said}".strip())
