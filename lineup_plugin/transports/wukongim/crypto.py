"""WuKongIM's encryption and signatures, byte for byte: X25519 key agreement at CONNECT, the
AES-128-CBC session cipher for message payloads, and the MD5 ``msgKey`` signatures of SEND and
RECV packets. No I/O."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, replace
from typing import TypeVar

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from lineup_plugin.errors import RelayProtocolError

from .proto import RecvPacket, SendPacket


def generate_private_key() -> X25519PrivateKey:
    """Return a fresh X25519 private key for one CONNECT."""
    return X25519PrivateKey.generate()


def public_key_b64(private_key: X25519PrivateKey) -> str:
    """Return the base64 of the raw 32-byte public key, as CONNECT's ``clientKey`` wants."""
    return base64.b64encode(private_key.public_key().public_bytes_raw()).decode()


def derive_aes_key(private_key: X25519PrivateKey, peer_key_b64: str) -> bytes:
    """Return the 16 ASCII bytes of the session key: ``md5hex(base64(X25519 secret))[:16]``."""
    try:
        raw = base64.b64decode(peer_key_b64, validate=True)
        peer = X25519PublicKey.from_public_bytes(raw[:32])
        shared = private_key.exchange(peer)
    except ValueError as exc:
        raise RelayProtocolError(f"bad X25519 public key from the peer: {exc}") from None
    return hashlib.md5(base64.b64encode(shared)).hexdigest()[:16].encode()


def random_salt() -> str:
    """Return a 16-character alphanumeric IV, as the server puts in CONNACK's ``salt``."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "".join(secrets.choice(alphabet) for _ in range(16))


def md5_hex(data: bytes) -> str:
    """Return the lowercase hex MD5 of ``data`` (msgKey and key derivation use it)."""
    return hashlib.md5(data).hexdigest()


@dataclass(frozen=True, slots=True)
class SessionCipher:
    """AES-128-CBC/PKCS7 with the session key and the static IV; ciphertext is base64 bytes."""

    key: bytes
    iv: bytes

    @classmethod
    def from_connack(cls, private_key: X25519PrivateKey, server_key: str, salt: str) -> SessionCipher:
        """Derive the session cipher the way the SDKs do (the IV is the salt's first 16 chars)."""
        iv = salt[:16].encode()
        if len(iv) != 16:
            raise RelayProtocolError(f"CONNACK salt must have 16 characters, got {len(iv)}")
        return cls(derive_aes_key(private_key, server_key), iv)

    def encrypt(self, plain: bytes) -> bytes:
        """Return ``base64(AES-CBC(pkcs7(plain)))`` as ASCII bytes."""
        padder = padding.PKCS7(128).padder()
        encryptor = Cipher(algorithms.AES(self.key), modes.CBC(self.iv)).encryptor()
        padded = padder.update(plain) + padder.finalize()
        return base64.b64encode(encryptor.update(padded) + encryptor.finalize())

    def decrypt(self, data: bytes) -> bytes:
        """Invert :meth:`encrypt`; raise :class:`RelayProtocolError` on any malformation."""
        try:
            raw = base64.b64decode(data, validate=True)
            decryptor = Cipher(algorithms.AES(self.key), modes.CBC(self.iv)).decryptor()
            padded = decryptor.update(raw) + decryptor.finalize()
            unpadder = padding.PKCS7(128).unpadder()
            return unpadder.update(padded) + unpadder.finalize()
        except ValueError:
            raise RelayProtocolError("payload cannot be decrypted with the session key") from None

    def msg_key(self, sign: bytes) -> str:
        """Return the msgKey for a sign string: ``md5hex(base64(AES(sign)))``."""
        return md5_hex(self.encrypt(sign))


_Signable = TypeVar("_Signable", SendPacket, RecvPacket)


def send_sign(packet: SendPacket) -> bytes:
    """The string a SEND's msgKey signs: clientSeq, clientMsgNo, channel, type, payload."""
    head = f"{packet.client_seq}{packet.client_msg_no}{packet.channel_id}{packet.channel_type}"
    return head.encode() + packet.payload


def recv_sign(packet: RecvPacket) -> bytes:
    """The string a RECV's msgKey signs (WuKongIMGoProto ``RecvPacket.VerityString``)."""
    head = (
        f"{packet.message_id}{packet.message_seq}{packet.client_msg_no}{packet.timestamp}"
        f"{packet.from_uid}{packet.channel_id}{packet.channel_type}"
    )
    return head.encode() + packet.payload


def signed(cipher: SessionCipher, packet: _Signable) -> _Signable:
    """Return ``packet`` with its msgKey set (its payload must already be encrypted)."""
    sign = send_sign(packet) if isinstance(packet, SendPacket) else recv_sign(packet)
    return replace(packet, msg_key=cipher.msg_key(sign))


def check_msg_key(cipher: SessionCipher, packet: SendPacket | RecvPacket) -> None:
    """Raise :class:`RelayProtocolError` unless ``packet.msg_key`` signs its fields."""
    if isinstance(packet, SendPacket):
        kind, sign = "SEND", send_sign(packet)
    else:
        kind, sign = "RECV", recv_sign(packet)
    if not secrets.compare_digest(cipher.msg_key(sign).encode(), packet.msg_key.encode()):
        raise RelayProtocolError(f"bad msgKey on {kind} message {packet.client_msg_no!r}")
