"""Files sent either way between the App and the agent, kept by content in ``<data_dir>/media``.

Layout::

    media/files/<first 2 hex digits>/<sha256>        the bytes, written once (temp file, fsync, rename)
    media/files/<first 2 hex digits>/<sha256>.json   name, media type, size, when it was kept
    media/incoming/<random>.part                     an upload under way (deleted if it fails)

An upload from the App comes as ``file.begin`` then ``file.chunk`` pieces over the App's own
(authenticated) WebSocket or relay link. Everything that can be judged before a byte is kept is
judged at ``file.begin``: the declared size against ``max_file_bytes``, the media type against
``file_types``, the name (no path, no control characters), and the room left under
``media_quota_bytes`` (the kept files and the uploads under way together). Each piece is decoded and appended to a
``.part`` file at once, so memory holds one piece, and the running total may never pass the
declared size. A piece out of order, bad base64, too many bytes, a wrong SHA-256, an image whose
bytes are not of its type, a link that closes or an upload left idle for
:data:`UPLOAD_IDLE_SECONDS` all end the upload and delete its ``.part``: nothing half-written is
ever under ``files/``. Files are named by their SHA-256, so the same photo sent twice is kept once.

Files are served to the App from the same origin at ``/media/<sha256>?key=<key>``: the key is an
HMAC of the file's hash under the App's token (:meth:`MediaStore.use_secret`), so only someone the
token's holder was sent the link by can fetch it, and one leaked link opens one file. Files older
than ``media_retention_days`` are deleted (:meth:`MediaStore.sweep`, at most every
:data:`SWEEP_SECONDS`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from .errors import MediaError
from .private import FILE_MODE, private_dir, private_file
from .protocol.messages import INLINE_MAX, Attachment, FileBegin, FileChunk

log = logging.getLogger(__name__)

#: an upload that received no piece for this long is dropped (seconds)
UPLOAD_IDLE_SECONDS = 600.0
#: uploads one link may have under way at once
MAX_UPLOADS_PER_LINK = 4
#: how often at most the retention sweep runs (seconds)
SWEEP_SECONDS = 3600.0
#: media types served inline (shown by the App); every other file is served as a download
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: the first bytes an image of each type starts with
_MAGIC: dict[str, Callable[[bytes], bool]] = {
    "image/png": lambda head: head.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda head: head.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda head: head[:6] in (b"GIF87a", b"GIF89a"),
    "image/webp": lambda head: head[:4] == b"RIFF" and head[8:12] == b"WEBP",
    "image/heic": lambda head: head[4:8] == b"ftyp",
    "image/heif": lambda head: head[4:8] == b"ftyp",
}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MIME = re.compile(r"^[A-Za-z0-9.+-]+/[A-Za-z0-9.+-]{1,100}$")
_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\]")


class StoredFile(NamedTuple):
    """A kept file: its hash, the name and type it was sent with, its size and where it is on disk."""

    sha256: str
    name: str
    mime: str
    size: int
    path: Path


def check_name(name: str) -> str:
    """``name`` if it is a plain file name; a MediaError ``bad_file_name`` if it holds a path or control characters."""
    if _UNSAFE_NAME.search(name) or name.strip() in ("", ".", "..") or name.startswith(".."):
        raise MediaError("bad_file_name", f"file name {name[:80]!r} must be a plain name, without a path")
    return name


def type_allowed(mime: str, allowed: Iterable[str]) -> bool:
    """Whether media type ``mime`` is admitted by ``allowed`` (exact types, or ``type/*``)."""
    mime = mime.lower()
    major = mime.split("/", 1)[0]
    return any(mime == pattern.lower() or pattern.lower() == f"{major}/*" for pattern in allowed)


def check_content(mime: str, head: bytes) -> None:
    """A MediaError ``file_type_refused`` when a file sent as an image does not start like one."""
    looks_right = _MAGIC.get(mime.lower())
    if looks_right is not None and not looks_right(head):
        raise MediaError("file_type_refused", f"the file is not a valid {mime} image (its bytes say otherwise)")


@dataclass
class _Upload:
    begin: FileBegin
    owner: object
    part: Path
    hasher: Any = field(default_factory=hashlib.sha256)
    received: int = 0
    next_seq: int = 0
    head: bytes = b""
    touched: float = 0.0


class MediaStore:
    """The files of one data directory (see the module docstring). Not thread-safe: one event loop uses it."""

    def __init__(
        self,
        data_dir: Path,
        *,
        max_bytes: int,
        types: Iterable[str],
        retention_days: float,
        quota_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.data_dir = data_dir
        self.root = data_dir / "media"
        self.files = self.root / "files"
        self.incoming = self.root / "incoming"
        self.max_bytes = max_bytes
        #: the most bytes the kept files may take together (None: no bound)
        self.quota = quota_bytes
        self._used: int | None = None  # bytes under files/, counted on first need
        self.types = tuple(types)
        self.retention = retention_days * 86400.0
        self.clock = clock
        self._secret: bytes | None = None
        self._uploads: dict[str, _Upload] = {}
        self._swept = 0.0

    @classmethod
    def from_settings(cls, settings: Any) -> MediaStore:
        """The media store of ``settings``: ``data_dir``, ``max_file_bytes``, ``file_types``, retention.

        It sweeps at once: what a process killed mid-upload left in ``incoming/`` goes, as do expired files.
        """
        store = cls(
            settings.data_dir,
            max_bytes=settings.max_file_bytes,
            types=settings.file_types,
            retention_days=settings.media_retention_days,
            quota_bytes=settings.media_quota_bytes,
        )
        store.sweep()
        return store

    # ------------------------------------------------------------------------ links

    def use_secret(self, secret: str) -> None:
        """Sign download links with ``secret`` (the direct server's token); without one files get no URL."""
        self._secret = secret.encode()

    def key(self, sha256: str) -> str | None:
        """The key of the download link of file ``sha256`` (None without a secret)."""
        if self._secret is None:
            return None
        return hmac.new(self._secret, f"media:{sha256}".encode(), hashlib.sha256).hexdigest()[:32]

    def key_matches(self, sha256: str, key: str) -> bool:
        """Whether ``key`` opens file ``sha256`` (compared in constant time)."""
        expected = self.key(sha256)
        return expected is not None and hmac.compare_digest(expected.encode(), key.encode("utf-8", "replace"))

    def attachment(self, file: StoredFile, *, inline: bool = False) -> Attachment:
        """``file`` as the App is told of it: its download link, and its bytes too if ``inline`` and small."""
        key = self.key(file.sha256)
        data = None
        if inline and file.size <= INLINE_MAX:
            data = base64.b64encode(file.path.read_bytes()).decode("ascii")
        url = f"/media/{file.sha256}?key={key}" if key is not None else None
        return Attachment(id=file.sha256, name=file.name, mime=file.mime, size=file.size, url=url, data=data)

    # ------------------------------------------------------------------------ kept files

    def _path(self, sha256: str) -> Path:
        return self.files / sha256[:2] / sha256

    def get(self, sha256: str) -> StoredFile | None:
        """The kept file ``sha256``, or None (unknown, expired, or not a hash at all)."""
        if not _SHA256.match(sha256):
            return None
        path = self._path(sha256)
        try:
            meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
            size = path.stat().st_size
        except (OSError, ValueError):
            return None
        return StoredFile(sha256, str(meta["name"]), str(meta["mime"]), size, path)

    def received(self, attachment: Attachment) -> StoredFile:
        """The file an App's ``text`` names: one it uploaded (by ``id``), or one it carries inline (``data``)."""
        if attachment.data is not None:
            try:
                data = base64.b64decode(attachment.data, validate=True)
            except (binascii.Error, ValueError):
                raise MediaError("upload_failed", f"{attachment.name!r} is not valid base64") from None
            if hashlib.sha256(data).hexdigest() != attachment.id:
                raise MediaError("upload_failed", f"{attachment.name!r} arrived damaged: its SHA-256 does not match")
            return self.put(data, attachment.name, attachment.mime)
        known = self.get(attachment.id)
        if known is None:
            raise MediaError("unknown_file", f"file {attachment.name!r} is not (or no longer) kept; send it again")
        return known._replace(name=attachment.name)

    def put(self, data: bytes, name: str, mime: str, *, check: bool = True) -> StoredFile:
        """Keep ``data`` (a whole file) as ``name`` of type ``mime``.

        With ``check`` (a file from the App) the size, type and name limits apply; the agent's own
        files are only named safely.
        """
        sha256 = hashlib.sha256(data).hexdigest()
        if check:
            self._admit(name, mime, len(data), sha256)
            check_content(mime, data[:16])
        if not check:
            name = _safe_name(name)
            mime = mime if _MIME.match(mime) else "application/octet-stream"
        part = self.incoming / f"{secrets.token_hex(8)}.part"
        try:
            private_dir(self.incoming, root=self.data_dir)
            with os.fdopen(private_file(part), "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            return self._keep(part, sha256, name, mime, len(data))
        except OSError as exc:
            raise _not_kept(exc) from None
        finally:
            part.unlink(missing_ok=True)

    def _keep(self, part: Path, sha256: str, name: str, mime: str, size: int) -> StoredFile:
        """Move a complete ``.part`` into ``files/`` under its hash (its metadata first, the bytes last)."""
        path = self._path(sha256)
        private_dir(path.parent, root=self.data_dir)
        meta = path.with_suffix(".json")
        meta_part = part.with_suffix(".json.part")
        with os.fdopen(private_file(meta_part), "w", encoding="utf-8") as out:
            json.dump({"name": name, "mime": mime, "size": size, "kept_at": self.clock()}, out)
        os.replace(meta_part, meta)
        if path.exists():
            os.utime(path)  # sent again: kept for another retention period
            path.chmod(FILE_MODE)  # kept by an older version that left it readable by others
        else:
            self.used()  # counted before the new file is there
            os.replace(part, path)
            self._used = (self._used or 0) + size
        self.sweep()
        return StoredFile(sha256, name, mime, size, path)

    def _admit(self, name: str, mime: str, size: int, sha256: str | None = None) -> None:
        check_name(name)
        if size > self.max_bytes:
            raise MediaError(
                "file_too_large", f"{name!r} is {size:,} bytes; the agent takes files up to {self.max_bytes:,} bytes"
            )
        if not type_allowed(mime, self.types):
            raise MediaError(
                "file_type_refused", f"files of type {mime} are not accepted (accepted: {', '.join(self.types)})"
            )
        if self.quota is not None and not (sha256 is not None and self.get(sha256) is not None):  # kept: no room
            taken = self.used() + sum(upload.begin.size for upload in self._uploads.values())
            if taken + size > self.quota:
                days = self.retention / 86400.0
                raise MediaError(
                    "storage_full",
                    f"the agent's room for files is full ({taken:,} of {self.quota:,} bytes taken, {name!r} needs "
                    f"{size:,}): files go after {days:g} days, or the owner raises media_quota_bytes",
                )

    def used(self) -> int:
        """The bytes the kept files take (counted once from the disk, then kept up to date)."""
        if self._used is None:
            total = 0
            for path in self.files.glob("*/*") if self.files.is_dir() else ():
                if not path.suffix:
                    with contextlib.suppress(OSError):
                        total += path.stat().st_size
            self._used = total
        return self._used

    # ------------------------------------------------------------------------ uploads

    def begin(self, owner: object, begin: FileBegin) -> None:
        """An upload starts on link ``owner``; MediaError if it cannot be taken (nothing is kept then)."""
        self._drop_idle()
        if begin.upload_id in self._uploads:
            raise MediaError("upload_failed", f"upload {begin.upload_id!r} is already under way")
        if sum(1 for upload in self._uploads.values() if upload.owner is owner) >= MAX_UPLOADS_PER_LINK:
            raise MediaError("upload_failed", f"at most {MAX_UPLOADS_PER_LINK} uploads at a time")
        self._admit(begin.name, begin.mime, begin.size, begin.sha256)
        part = self.incoming / f"{secrets.token_hex(8)}.part"
        try:
            private_dir(self.incoming, root=self.data_dir)
            os.close(private_file(part))
        except OSError as exc:
            raise _not_kept(exc) from None
        self._uploads[begin.upload_id] = _Upload(begin, owner, part, touched=self.clock())

    def chunk(self, owner: object, chunk: FileChunk) -> StoredFile | None:
        """The next piece of an upload: the kept file once it is complete, else None; MediaError ends it."""
        upload = self._uploads.get(chunk.upload_id)
        if upload is None or upload.owner is not owner:
            message = f"no upload {chunk.upload_id!r} is under way (cut off by a lost connection?): send the file again"
            raise MediaError("upload_failed", message)
        try:
            return self._append(upload, chunk)
        except MediaError:
            self._discard(chunk.upload_id)
            raise
        except OSError as exc:
            self._discard(chunk.upload_id)
            raise _not_kept(exc) from None

    def _append(self, upload: _Upload, chunk: FileChunk) -> StoredFile | None:
        begin = upload.begin
        if chunk.seq != upload.next_seq:
            due = upload.next_seq
            raise MediaError("upload_failed", f"piece {chunk.seq} of {begin.name!r} came where {due} was due")
        try:
            data = base64.b64decode(chunk.data, validate=True)
        except (binascii.Error, ValueError):
            raise MediaError("upload_failed", f"piece {chunk.seq} of {begin.name!r} is not valid base64") from None
        if upload.received + len(data) > begin.size:
            raise MediaError("upload_failed", f"{begin.name!r} is longer than the {begin.size:,} bytes announced")
        if len(upload.head) < 16:
            upload.head += data[: 16 - len(upload.head)]
        with upload.part.open("ab") as out:
            out.write(data)
            if upload.received + len(data) == begin.size:
                out.flush()
                os.fsync(out.fileno())
        upload.hasher.update(data)
        upload.received += len(data)
        upload.next_seq += 1
        upload.touched = self.clock()
        if upload.received < begin.size:
            return None
        check_content(begin.mime, upload.head)
        sha256 = str(upload.hasher.hexdigest())
        if begin.sha256 is not None and sha256 != begin.sha256:
            raise MediaError("upload_failed", f"{begin.name!r} arrived damaged: its SHA-256 does not match")
        del self._uploads[begin.upload_id]
        try:
            return self._keep(upload.part, sha256, begin.name, begin.mime, begin.size)
        finally:
            upload.part.unlink(missing_ok=True)

    def abort(self, owner: object) -> int:
        """Link ``owner`` closed: drop its unfinished uploads; returns how many."""
        ids = [upload_id for upload_id, upload in self._uploads.items() if upload.owner is owner]
        for upload_id in ids:
            self._discard(upload_id)
        return len(ids)

    def _discard(self, upload_id: str) -> None:
        upload = self._uploads.pop(upload_id, None)
        if upload is not None:
            upload.part.unlink(missing_ok=True)

    def _drop_idle(self) -> None:
        limit = self.clock() - UPLOAD_IDLE_SECONDS
        for upload_id in [uid for uid, upload in self._uploads.items() if upload.touched < limit]:
            log.info("lineup: dropped upload %s (no piece for %.0f s)", upload_id, UPLOAD_IDLE_SECONDS)
            self._discard(upload_id)

    # ------------------------------------------------------------------------ retention

    def sweep(self, *, force: bool = False) -> int:
        """Delete files kept longer than the retention, and stray ``.part`` files; returns how many files went."""
        now = self.clock()
        if not force and now - self._swept < SWEEP_SECONDS:
            return 0
        self._swept = now
        removed = 0
        live = {upload.part for upload in self._uploads.values()}
        for part in self.incoming.glob("*.part") if self.incoming.is_dir() else ():
            if part not in live:
                part.unlink(missing_ok=True)
        for path in self.files.glob("*/*") if self.files.is_dir() else ():
            if path.suffix:
                continue
            try:
                info = path.stat()
            except OSError:
                continue
            if info.st_mtime < now - self.retention:
                path.with_suffix(".json").unlink(missing_ok=True)
                path.unlink(missing_ok=True)
                removed += 1
                if self._used is not None:
                    self._used = max(0, self._used - info.st_size)
        return removed


def _not_kept(exc: OSError) -> MediaError:
    """The MediaError for a disk that refused a file (full, read-only...)."""
    return MediaError("upload_failed", f"the agent could not keep the file: {exc.strerror or exc}")


def _safe_name(name: str) -> str:
    """The last part of ``name`` without control characters (for the agent's own files)."""
    base = _UNSAFE_NAME.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".")
    return base[:255] or "file"
