"""The agent's VAPID key (RFC 8292): who signs every push, kept in ``<data_dir>/vapid.pem``.

The key is made on first use and written once, mode 0600, atomically (a second process that
races the first reads the key the first wrote). The App subscribes with its public half
(``applicationServerKey``); a push service then accepts pushes for that subscription only when
they carry a JWT signed with the private half, so no one else can push to the user's devices.
Signing is py-vapid's (:class:`py_vapid.Vapid02`, the ``vapid t=…, k=…`` scheme).
"""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

from ..errors import PushError
from ..private import write_private

KEY_FILE = "vapid.pem"
#: how long a VAPID JWT is valid (RFC 8292 allows at most 24 hours; Apple refuses more)
JWT_LIFETIME = 12 * 3600


def b64url(data: bytes) -> str:
    """URL-safe base64 without padding, as Web Push writes keys."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def audience(endpoint: str) -> str:
    """The origin of a push endpoint (``scheme://host[:port]``): the ``aud`` of its JWT."""
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}"


class VapidKey:
    """The agent's P-256 signing key for Web Push."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        self._private_key = private_key
        self._vapid = Vapid02(private_key=private_key, conf={"no-strict": True})  # the contact is checked by Settings
        point = private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        #: the public key as the App's ``pushManager.subscribe`` takes it (``applicationServerKey``)
        self.public_key = b64url(point)

    @classmethod
    def load_or_create(cls, data_dir: Path) -> VapidKey:
        """The key in ``data_dir/vapid.pem``, made (0600) if there is none. PushError if it cannot be read or kept."""
        path = data_dir / KEY_FILE
        try:
            pem = path.read_bytes()
        except FileNotFoundError:
            pem = cls._create(path)
        except OSError as exc:
            raise PushError(f"cannot read the push key {path}: {exc.strerror or exc}") from exc
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except ValueError as exc:
            raise PushError(f"the push key {path} is damaged: delete it to make a new one") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
            raise PushError(f"the push key {path} is not a P-256 key: delete it to make a new one")
        return cls(key)

    @staticmethod
    def _create(path: Path) -> bytes:
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        try:
            try:
                write_private(path, pem, replace=False)  # never replaces a key another process made meanwhile
            except FileExistsError:
                return path.read_bytes()
            return pem
        except OSError as exc:
            raise PushError(f"cannot keep the push key in {path}: {exc.strerror or exc}") from exc

    def authorization(self, endpoint: str, contact: str, now: float) -> str:
        """The ``Authorization`` header for a push to ``endpoint``: a JWT valid for :data:`JWT_LIFETIME`."""
        claims = {"aud": audience(endpoint), "exp": int(now) + JWT_LIFETIME, "sub": contact}
        return str(self._vapid.sign(claims)["Authorization"])
