"""Files both ways over the real direct server: uploads in pieces over the App's WebSocket, downloads
over HTTP with the key; every refusal says why and leaves nothing half-written in the data dir."""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import Hub, MediaError, load_registry
from lineup_plugin.media import UPLOAD_IDLE_SECONDS, MediaStore, StoredFile
from lineup_plugin.protocol.messages import (
    Attachment,
    Error,
    FileBegin,
    FileChunk,
    FileStored,
    History,
    Text,
)
from lineup_plugin.transports.direct.server import DirectServer
from tests.transports.test_direct import http_get, make_settings
from tests.wsapp import WsApp, wait_until

#: a 1×1 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
LIMIT = 64 * 1024


class Received:
    """What the hub handed the runtime: App text with its files."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[StoredFile]]] = []

    def __call__(self, device_id: str, text: str, files: list[StoredFile]) -> None:
        self.messages.append((text, files))


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[DirectServer]:
    settings = make_settings(tmp_path, max_file_bytes=LIMIT)
    hub = Hub(load_registry(load_entrypoints=False), media=MediaStore.from_settings(settings), on_files=Received())
    async with DirectServer.from_settings(hub, settings) as running:
        yield running


def media_dir(server: DirectServer) -> MediaStore:
    assert server.hub.media is not None
    return server.hub.media


def leftovers(server: DirectServer) -> list[str]:
    """Every file under the media directory."""
    root = media_dir(server).root
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def pieces(data: bytes, size: int = 1000) -> list[str]:
    return [base64.b64encode(data[i : i + size]).decode() for i in range(0, len(data), size)] or [""]


async def upload(app: WsApp, data: bytes, *, name: str = "photo.png", mime: str = "image/png", **begin: Any) -> Any:
    """Send ``data`` as an upload; the agent's answer (``file.stored`` or ``error``)."""
    fields: dict[str, Any] = {"upload_id": "u1", "name": name, "mime": mime, "size": len(data)}
    fields["sha256"] = hashlib.sha256(data).hexdigest()
    await app.send(FileBegin(**{**fields, **begin}))
    for seq, piece in enumerate(pieces(data)):
        await app.send(FileChunk(upload_id="u1", seq=seq, data=piece))
    while True:
        message = await app.recv()
        if message.kind in ("file.stored", "error"):
            return message.payload


async def refused(app: WsApp, begin: dict[str, Any], chunks: list[FileChunk]) -> Error:
    await app.send(FileBegin.model_validate({"upload_id": "u1", "name": "a.png", "mime": "image/png", **begin}))
    for chunk in chunks:
        await app.send(chunk)
    error = (await app.next("error")).payload
    assert isinstance(error, Error) and error.upload_id == "u1"
    return error


# ------------------------------------------------------------------------------ uploads


async def test_an_upload_is_kept_by_its_hash_and_its_text_reaches_the_runtime_with_the_file(
    server: DirectServer,
) -> None:
    app = await WsApp.connect(server)
    photo = PNG + os.urandom(5000)
    stored = await upload(app, photo)
    assert isinstance(stored, FileStored)
    sha = hashlib.sha256(photo).hexdigest()
    assert stored.file.id == sha and stored.file.size == len(photo) and stored.file.url
    await app.send(Text(text="what is this?", attachments=[stored.file]))
    received = server.hub.on_files
    assert isinstance(received, Received)
    await wait_until(lambda: received.messages)
    text, (file,) = received.messages[0]
    assert text == "what is this?" and file.path.read_bytes() == photo and file.mime == "image/png"
    assert leftovers(server) == [f"files/{sha[:2]}/{sha}", f"files/{sha[:2]}/{sha}.json"]
    await app.close()


async def test_a_file_too_large_is_refused_before_any_byte_is_kept(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    error = await refused(app, {"size": LIMIT + 1}, [])
    assert error.code == "file_too_large" and f"{LIMIT:,} bytes" in error.message
    assert leftovers(server) == []
    await app.close()


async def test_a_type_not_accepted_is_refused(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    error = await refused(app, {"size": 10, "name": "run.exe", "mime": "application/x-msdownload"}, [])
    assert error.code == "file_type_refused" and "application/x-msdownload" in error.message
    assert leftovers(server) == []
    await app.close()


async def test_an_image_whose_bytes_are_not_an_image_is_refused_and_deleted(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    error = await upload(app, b"<svg onload=alert(1)>", name="x.png")
    assert isinstance(error, Error) and error.code == "file_type_refused"
    assert leftovers(server) == []
    await app.close()


@pytest.mark.parametrize("name", ["../../etc/passwd", "a/b.png", "..\\x.png", "..", "ok\x00.png"])
async def test_a_name_with_a_path_is_refused(server: DirectServer, name: str) -> None:
    app = await WsApp.connect(server)
    error = await refused(app, {"size": 10, "name": name}, [])
    assert error.code == "bad_file_name" and "without a path" in error.message
    assert leftovers(server) == []
    await app.close()


async def test_more_bytes_than_announced_out_of_order_or_bad_base64_end_the_upload(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    too_long = await refused(app, {"size": 4}, [FileChunk(upload_id="u1", seq=0, data=pieces(PNG)[0])])
    assert too_long.code == "upload_failed" and "longer than the 4 bytes announced" in too_long.message
    skipped = await refused(app, {"size": 100}, [FileChunk(upload_id="u1", seq=1, data="AAAA")])
    assert "piece 1" in skipped.message and "0 was due" in skipped.message
    garbled = await refused(app, {"size": 100}, [FileChunk(upload_id="u1", seq=0, data="not base64!")])
    assert "not valid base64" in garbled.message
    assert leftovers(server) == []
    await app.close()


async def test_a_damaged_upload_fails_its_hash_and_is_deleted(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    error = await upload(app, PNG, sha256="0" * 64)
    assert isinstance(error, Error) and error.code == "upload_failed" and "SHA-256 does not match" in error.message
    assert leftovers(server) == []
    await app.close()


async def test_an_upload_cut_short_by_a_closed_connection_leaves_nothing(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    data = PNG + os.urandom(3000)
    await app.send(FileBegin(upload_id="u1", name="a.png", mime="image/png", size=len(data)))
    await app.send(FileChunk(upload_id="u1", seq=0, data=pieces(data)[0]))
    await wait_until(
        lambda: any(
            name.endswith(".part") and os.path.getsize(media_dir(server).root / name) for name in leftovers(server)
        )
    )
    await app.close()
    await wait_until(lambda: not server.hub.peers)
    assert leftovers(server) == []


async def test_an_idle_upload_is_dropped_and_a_chunk_without_begin_is_refused(tmp_path: Path) -> None:
    now = [time.time()]
    media = MediaStore(tmp_path, max_bytes=LIMIT, types=["image/*"], retention_days=1, clock=lambda: now[0])
    media.begin("link", FileBegin(upload_id="u1", name="a.png", mime="image/png", size=10))
    now[0] += UPLOAD_IDLE_SECONDS + 1
    media.begin("link", FileBegin(upload_id="u2", name="b.png", mime="image/png", size=10))
    assert [p.name for p in media.incoming.iterdir()].__len__() == 1
    with pytest.raises(MediaError, match="no upload 'u1' is under way"):
        media.chunk("link", FileChunk(upload_id="u1", seq=0, data="AAAA"))
    with pytest.raises(MediaError, match="no upload 'u2' is under way"):
        media.chunk("another link", FileChunk(upload_id="u2", seq=0, data="AAAA"))


async def test_uploads_past_the_data_dirs_quota_are_refused_storage_full_counting_kept_and_under_way(
    tmp_path: Path,
) -> None:
    """An App (or a stolen token) filling the disk 20 MiB a file: the files together have a bound."""
    settings = make_settings(tmp_path, max_file_bytes=LIMIT, media_quota_bytes=25_000)
    hub = Hub(load_registry(load_entrypoints=False), media=MediaStore.from_settings(settings), on_files=Received())
    async with DirectServer.from_settings(hub, settings) as server:
        app = await WsApp.connect(server)
        first = await upload(app, PNG + os.urandom(10_000), upload_id="u1")
        assert isinstance(first, FileStored)
        again = await upload(app, PNG + os.urandom(10_000))
        assert isinstance(again, FileStored)
        error = await upload(app, PNG + os.urandom(5_000))
        assert isinstance(error, Error) and error.code == "storage_full" and error.upload_id == "u1"
        assert f"{2 * (len(PNG) + 10_000):,} of 25,000 bytes taken" in error.message
        assert "media_quota_bytes" in error.message
        await app.close()
    assert len(leftovers(server)) == 4  # the two kept files and their metadata: nothing of the third
    restarted = MediaStore.from_settings(settings)  # a new process counts what is on disk
    with pytest.raises(MediaError, match="room for files is full"):
        restarted.put(PNG + os.urandom(5_000), "late.png", "image/png")
    kept = restarted.get(first.file.id)
    assert kept is not None  # a file kept already takes no more room when it is sent again
    assert restarted.put(kept.path.read_bytes(), "again.png", "image/png").sha256 == first.file.id
    under_way = MediaStore(tmp_path / "b", max_bytes=LIMIT, types=["image/*"], retention_days=1, quota_bytes=25_000)
    under_way.begin("link", FileBegin(upload_id="a", name="a.png", mime="image/png", size=20_000))
    with pytest.raises(MediaError) as refused_begin:
        under_way.begin("link", FileBegin(upload_id="b", name="b.png", mime="image/png", size=10_000))
    assert refused_begin.value.code == "storage_full"


def test_files_past_their_retention_make_room_under_the_quota(tmp_path: Path) -> None:
    now = [time.time()]
    media = MediaStore(
        tmp_path, max_bytes=LIMIT, types=["image/*"], retention_days=1, quota_bytes=2_000, clock=lambda: now[0]
    )
    old = media.put(PNG + b"o" * 1_500, "old.png", "image/png")
    with pytest.raises(MediaError):
        media.put(PNG + b"n" * 1_000, "new.png", "image/png")
    os.utime(old.path, (now[0] - 2 * 86400, now[0] - 2 * 86400))
    now[0] += 3601
    media.sweep()
    assert media.used() == 0
    assert media.put(PNG + b"n" * 1_000, "new.png", "image/png").size == len(PNG) + 1_000


async def test_text_naming_a_file_never_uploaded_is_refused(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    ghost = Attachment(id="ab" * 32, name="ghost.png", mime="image/png", size=3)
    await app.send(Text(text="see", attachments=[ghost]), id="msg-ghost")
    heard = []
    while (message := await app.recv()).kind != "error":
        heard.append(message.payload)
    error = message.payload
    assert isinstance(error, Error) and error.code == "unknown_file" and "send it again" in error.message
    assert error.ref == "msg-ghost"  # the App marks that message "not sent", with Retry
    # not delivered, so not in the history as if it were: no device is shown it
    assert not [e for p in heard if isinstance(p, History) for e in p.entries if e.ref == "msg-ghost"]
    await app.close()
    later = await WsApp.connect(server, "tablet")
    await later.send(Text(text="after"), id="msg-after")
    shown = []
    while not any(e.ref == "msg-after" for e in shown):
        payload = (await later.next("history")).payload
        assert isinstance(payload, History)
        shown += payload.entries
    assert [e.ref for e in shown if e.event == "text.in"] == ["msg-after"]
    await later.close()


async def test_a_small_file_may_come_inline_as_over_the_relay(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    sha = hashlib.sha256(PNG).hexdigest()
    inline = Attachment(id=sha, name="dot.png", mime="image/png", size=len(PNG), data=base64.b64encode(PNG).decode())
    await app.send(Text(text="inline", attachments=[inline]))
    received = server.hub.on_files
    assert isinstance(received, Received)
    await wait_until(lambda: received.messages)
    assert received.messages[0][1][0].path.read_bytes() == PNG
    await app.close()


# ---------------------------------------------------------------------------- downloads


async def test_an_agent_file_reaches_the_app_and_is_served_only_with_its_key(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    await server.hub.send_file("the chart", PNG, "chart.png", "image/png")
    message = (await app.next("text")).payload
    assert isinstance(message, Text) and message.text == "the chart"
    (file,) = message.attachments
    assert file.url and file.data is None and file.mime == "image/png"
    status, headers, body = await http_get(server.port, file.url)
    assert status == 200 and body == PNG and headers["content-type"] == "image/png"
    assert headers["content-security-policy"] == "default-src 'none'; sandbox"
    assert headers["x-content-type-options"] == "nosniff"
    no_key = await http_get(server.port, f"/media/{file.id}")
    wrong_key = await http_get(server.port, f"/media/{file.id}?key={'0' * 32}")
    traversal = await http_get(server.port, f"/media/../../token?key={file.url.split('key=')[1]}")
    assert [no_key[0], wrong_key[0], traversal[0]] == [403, 403, 403]
    assert b"needs the key" in no_key[2] and PNG not in no_key[2] + wrong_key[2] + traversal[2]
    await app.close()


async def test_a_file_that_is_not_a_raster_image_is_only_ever_a_download(server: DirectServer) -> None:
    app = await WsApp.connect(server)
    await server.hub.send_file("", b"<html><script>alert(1)</script>", "page.html", "text/html")
    (file,) = (await app.next("text")).payload.attachments  # type: ignore[union-attr]
    assert file.url
    status, headers, _ = await http_get(server.port, file.url)
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"] == "attachment; filename*=UTF-8''page.html"
    await app.close()


def test_an_agent_file_is_named_and_typed_safely(tmp_path: Path) -> None:
    media = MediaStore(tmp_path, max_bytes=LIMIT, types=[], retention_days=1)
    file = media.put(b"x", "../../report\x00.txt", "text/weird type", check=False)
    assert (file.name, file.mime) == ("report_.txt", "application/octet-stream")


def test_files_past_their_retention_are_deleted(tmp_path: Path) -> None:
    now = [time.time()]
    media = MediaStore(tmp_path, max_bytes=LIMIT, types=["image/*"], retention_days=1, clock=lambda: now[0])
    old = media.put(PNG, "old.png", "image/png")
    os.utime(old.path, (now[0] - 2 * 86400, now[0] - 2 * 86400))
    now[0] += 3601  # the next sweep is due
    fresh = media.put(PNG + b"x", "new.png", "image/png")
    assert media.get(old.sha256) is None and not old.path.with_suffix(".json").exists()
    assert media.get(fresh.sha256) is not None


def test_a_part_left_by_a_killed_process_is_gone_at_the_next_start(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    stray = settings.data_dir / "media" / "incoming" / "0123456789abcdef.part"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"half a photo")
    MediaStore.from_settings(settings)
    assert not stray.exists()


async def test_an_upload_without_the_token_is_refused_and_nothing_is_kept(server: DirectServer) -> None:
    intruder = await WsApp.connect(server, token="not-the-token-at-all", welcome=False)
    await intruder.send(FileBegin(upload_id="u1", name="a.png", mime="image/png", size=len(PNG)))
    await intruder.send(FileChunk(upload_id="u1", seq=0, data=pieces(PNG)[0]))
    code, reason, told = await intruder.closed()
    assert (code, reason) == (4401, "wrong token")
    assert [message.kind for message in told] == ["error"]
    assert leftovers(server) == []


async def test_a_large_piece_sent_the_moment_the_app_is_welcomed_is_taken(tmp_path: Path) -> None:
    """The frame limit is raised before the welcome leaves (an App flushes its outbox on the welcome)."""
    settings = make_settings(tmp_path, max_file_bytes=1024 * 1024)
    hub = Hub(load_registry(load_entrypoints=False), media=MediaStore.from_settings(settings))
    async with DirectServer.from_settings(hub, settings) as running:
        data = os.urandom(512 * 1024)
        app = await WsApp.connect(running)
        await app.send(FileBegin(upload_id="u1", name="notes.txt", mime="text/plain", size=len(data)))
        await app.send(FileChunk(upload_id="u1", seq=0, data=base64.b64encode(data).decode()))
        stored = (await app.next("file.stored")).payload
        assert isinstance(stored, FileStored) and stored.file.id == hashlib.sha256(data).hexdigest()
        await app.close()


async def test_a_disk_that_refuses_the_file_is_a_clear_error(server: DirectServer) -> None:
    media = media_dir(server)
    media.root.mkdir(parents=True)
    media.incoming.write_text("not a directory")  # where uploads go cannot be written
    app = await WsApp.connect(server)
    error = await refused(app, {"size": 10}, [])
    assert error.code == "upload_failed" and error.message.startswith("the agent could not keep the file:")
    assert not media.files.exists()
    await app.close()
