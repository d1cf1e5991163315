"""Files between the App and the agent as the hub handles them: uploads piece by piece, files sent
with a message, the agent's files. The bytes are kept by :class:`~lineup_plugin.media.MediaStore`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .errors import MediaError
from .media import MediaStore, StoredFile
from .protocol.messages import Attachment, Error, FileBegin, FileStored, Payload
from .protocol.outputs import FileReceived

#: answers the device on a link
Reply = Callable[[Any, Payload], None]
#: records that the App on a link sent a file (its audit detail)
AuditFile = Callable[[Any, str], None]


class Uploads:
    """The files of one hub's Apps (``media``: None when the agent takes no files)."""

    def __init__(self, media: MediaStore | None, *, reply: Reply, audit: AuditFile) -> None:
        self.media = media
        self.reply = reply
        self.audit = audit

    def _store(self, what: str) -> MediaStore:
        if self.media is None:
            raise MediaError("no_media", f"this agent {what} no files")
        return self.media

    def piece(self, event: FileReceived[Any]) -> None:
        """A piece of an upload: keep it; the App is told when the file is complete, or why it was refused."""
        message = event.message
        try:
            media = self._store("takes")
            if isinstance(message, FileBegin):
                media.begin(event.link, message)
                return
            file = media.chunk(event.link, message)
        except MediaError as exc:
            self.reply(event.link, Error(code=exc.code, message=str(exc), upload_id=message.upload_id))
            return
        if file is not None:
            self.audit(event.link, f"{file.sha256} {file.size}")
            self.reply(event.link, FileStored(upload_id=message.upload_id, file=media.attachment(file)))

    def with_text(
        self, attachments: Iterable[Attachment], links: Iterable[Any], *, ref: str | None = None
    ) -> list[StoredFile] | None:
        """The files sent with a message (each uploaded before, or inline); None when one is refused:
        the device's ``links`` are told the message (envelope ``ref``) was not delivered."""
        try:
            media = self._store("takes")
            return [media.received(attachment) for attachment in attachments]
        except MediaError as exc:
            for link in links:
                self.reply(link, Error(code=exc.code, message=f"the message was not delivered: {exc}", ref=ref))
            return None

    def outgoing(self, data: bytes, name: str, mime: str, *, inline: bool) -> Attachment:
        """Keep the agent's file ``data``; the attachment that sends it (``inline``: with its bytes, when small)."""
        media = self._store("keeps")
        return media.attachment(media.put(data, name, mime, check=False), inline=inline)

    def abort(self, link: Any) -> None:
        """``link`` closed: its uploads under way are dropped."""
        if self.media is not None:
            self.media.abort(link)
