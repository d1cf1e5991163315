"""A local Web Push service on 127.0.0.1, and a browser's side of a subscription, for the push tests.

:class:`FakePushService` takes ``POST /push/<name>`` as a push service does (RFC 8030), keeps
every request, and answers with the statuses a test queues (201 when none is queued).
:class:`Subscriber` is what a browser holds for one subscription: a P-256 key pair and an auth
secret made by the test; it opens what the agent sealed (RFC 8291) and checks the VAPID JWT
(RFC 8292) with nothing but ``cryptography`` and ``http_ece``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import http_ece
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Received:
    """One request the push service took."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakePushService:
    """An HTTP/1.1 push service on 127.0.0.1 (see the module docstring)."""

    requests: list[Received] = field(default_factory=list)
    #: statuses to answer with, in order (then 201), each with extra headers
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    port: int = 0
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def endpoint(self, name: str) -> str:
        return f"{self.origin}/push/{name}"

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """The first ``count`` requests, once they have arrived."""
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: len(self.requests) >= count), timeout)
        return self.requests[:count]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, extra = self.answers.pop(0) if self.answers else (201, {})
                reply = f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n"
                reply += "".join(f"{k}: {v}\r\n" for k, v in extra.items()) + "\r\n"
                writer.write(reply.encode("latin-1"))
                await writer.drain()
                async with self._arrived:
                    self.requests.append(Received(method, path, headers, body))
                    self._arrived.notify_all()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def push_service() -> AsyncIterator[FakePushService]:
    """A started :class:`FakePushService` on 127.0.0.1, port 0."""
    service = FakePushService()
    server = await asyncio.start_server(service._serve, "127.0.0.1", 0)
    service.port = server.sockets[0].getsockname()[1]
    try:
        yield service
    finally:
        server.close()
        await server.wait_closed()


class Subscriber:
    """A browser's half of one push subscription (keys made here) at ``endpoint``."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.private_key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        self.p256dh = b64url(point)

    def subscription(self) -> dict[str, Any]:
        """What ``PushSubscription.toJSON()`` gives the App."""
        keys = {"p256dh": self.p256dh, "auth": b64url(self.auth)}
        return {"endpoint": self.endpoint, "expirationTime": None, "keys": keys}

    def open(self, body: bytes) -> bytes:
        """The plaintext of a sealed push (raises if it was not sealed for this subscription)."""
        plaintext: bytes = http_ece.decrypt(
            body, private_key=self.private_key, auth_secret=self.auth, version="aes128gcm"
        )
        return plaintext

    def notice(self, request: Received) -> dict[str, Any]:
        """The JSON notice a push carries."""
        notice: dict[str, Any] = json.loads(self.open(request.body))
        return notice


def vapid_claims(authorization: str, public_key: str) -> dict[str, Any]:
    """The claims of a ``vapid t=<jwt>, k=<key>`` header, after checking that ``k`` is ``public_key``
    and that the JWT is an ES256 JWT signed by it. Raises (InvalidSignature, AssertionError) if not."""
    scheme, _, rest = authorization.partition(" ")
    assert scheme == "vapid", authorization
    params = dict(part.strip().split("=", 1) for part in rest.split(","))
    assert params["k"] == public_key
    header_b64, claims_b64, signature_b64 = params["t"].split(".")
    assert json.loads(unb64url(header_b64)) == {"typ": "JWT", "alg": "ES256"}
    raw = unb64url(signature_b64)
    assert len(raw) == 64
    signature = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(public_key))
    key.verify(signature, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
    claims: dict[str, Any] = json.loads(unb64url(claims_b64))
    return claims
