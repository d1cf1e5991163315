"""The LineUp App as a Hermes messaging platform (``lineup``), for the Hermes gateway.

Text typed in the App becomes a gateway :class:`MessageEvent` in the App user's session, so
Hermes' own rules for a busy agent (``display.busy_input_mode``: interrupt, queue or steer)
apply to it; the agent's replies come back through :meth:`LineUpAdapter.send` as ``text``
messages. Replies stream: the gateway's stream consumer sends the start of a reply and edits it
as the model writes (:meth:`LineUpAdapter.edit_message`); each edit becomes a ``message.delta``
and the final edit the ``text`` that settles it, under one message id (once: the stream consumer
finalizes a reply a second time with the same text, which is not sent again). Files the App sends
reach the model as the gateway's media (``media_urls``: images as image input, other files as
documents); the agent's images and files (``send_image_file``, ``send_document``) reach the
App as attachments. Hermes' ``clarify`` is shown as a ``choice`` card (an ``input`` card when it has no
choices) and a dangerous-command approval as a ``confirm`` card with Hermes' choices (allow once,
for this session, always, deny); the App's stop button is
Hermes' ``/stop``.

The adapter runs on the gateway's event loop; the LineUp hub runs on the server's own loop
thread. Calls between them go through :meth:`LineUpService.on_hub
<lineup_plugin.runtime.service.LineUpService.on_hub>` (gateway → hub: a task of the server's
portal) and ``asyncio.run_coroutine_threadsafe`` (hub → gateway). While connected, the adapter
is the runtime's :class:`~.runtime.GatewayHost` (where App text and the stop button go).

The App authenticated with the LineUp token (direct) or is the one configured WuKongIM user
(relay) before any of its messages reach the hub, so the adapter declares
``authorization_is_upstream``: no Hermes allowlist or pairing is needed for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import mimetypes
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import MediaError
from ...protocol import codec
from . import compat
from .common import (
    APP_CHAT,
    APP_USER,
    PLATFORM,
    Answer,
    app_chat,
    app_conversation,
    approval_card,
    approval_choice,
    approval_timeout,
    ask,
    clarify_answer,
    clarify_card,
    clarify_timeout,
)

if TYPE_CHECKING:
    from ...hub import Hub
    from ...media import StoredFile
    from ...protocol.messages import ToolResult
    from .runtime import HermesRuntime

log = logging.getLogger(__name__)

#: how long the gateway waits for a hand-off to the hub before it gives up
SUBMIT_TIMEOUT = 15.0

_api = compat.platform_api()


class LineUpAdapter(_api.BasePlatformAdapter):  # type: ignore[misc,name-defined]  # Hermes is untyped
    """Hermes' view of the LineUp App: one chat with the App user, spread over their devices."""

    authorization_is_upstream = True
    supports_async_delivery = True
    #: the gateway's stream consumer edits a streamed reply; its last edit says ``finalize``
    SUPPORTS_MESSAGE_EDITING = True
    REQUIRES_EDIT_FINALIZE = True
    #: the App shows long replies whole (the gateway splits longer ones)
    MAX_MESSAGE_LENGTH = 32_000

    def __init__(self, config: Any, runtime: HermesRuntime) -> None:
        super().__init__(config=config, platform=_api.Platform(PLATFORM))
        self.runtime = runtime
        self.svc = runtime.service
        self._loop: asyncio.AbstractEventLoop | None = None
        compat.stream_by_default(PLATFORM)

    @property
    def name(self) -> str:
        """The platform's display name."""
        return "LineUp"

    # lifecycle ---------------------------------------------------------------------------

    async def connect(self, *, is_reconnect: bool = False) -> bool:
        """Start the LineUp server in this (gateway) process, unless another process owns it."""
        try:
            serving = await asyncio.to_thread(self.svc.ensure_started, "gateway platform connect", role="gateway")
        except Exception as exc:
            log.error("lineup: cannot start the server: %s", exc)
            compat.set_fatal_error(self, "start_failed", str(exc), retryable=True)
            return False
        if not serving:
            owner = self.svc.owner
            message = f"the LineUp server is owned by another Hermes process ({owner or 'unknown'})"
            compat.set_fatal_error(self, "lock_conflict", message, retryable=True)
            return False
        self._loop = asyncio.get_running_loop()
        self.runtime.gateway.adapter = self
        compat.mark_connected(self)
        return True

    async def disconnect(self) -> None:
        """The gateway stops: stop the LineUp server."""
        compat.mark_disconnected(self)
        if self.runtime.gateway.adapter is self:
            self.runtime.gateway.adapter = None
        await asyncio.to_thread(self.svc.stop)

    # gateway → App -----------------------------------------------------------------------

    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        """An agent reply to every device of the App user, in the chat's conversation: a ``text``, or the
        start of a streamed one.

        The stream consumer's first piece of a reply ends with its cursor: it goes out as a
        ``message.delta``, and the edits that follow reuse the message id returned here.
        """
        return await self._reply(chat_id, codec.new_id("msg"), content, finalize=False)

    async def edit_message(self, chat_id: str, message_id: str, content: str, *, finalize: bool = False) -> Any:
        """The reply ``message_id`` reads ``content`` now: a ``message.delta`` while it is being written,
        else (``finalize``, or an edit of a settled message such as a tool-progress line) the ``text``
        that settles it under the same id."""
        return await self._reply(chat_id, message_id, content, finalize=finalize)

    async def _reply(self, chat_id: str, message_id: str, content: str, *, finalize: bool) -> Any:
        """A reply as the App shows it: without the cursor, nor the blank lines Hermes puts before
        the text that follows a tool call."""
        where = app_conversation(chat_id)
        cursor = compat.stream_cursor(self)
        writing = bool(cursor) and content.endswith(cursor) and not finalize
        if writing:
            text = content[: -len(cursor)].lstrip()
            return await self._to_hub(lambda hub: hub.stream_text(message_id, text, conversation_id=where), message_id)
        # the stream consumer of a platform that needs a final edit settles a reply's last tick with
        # finalize, then finalizes it again: the session sends nothing for the same text twice
        settled = content.strip()
        return await self._to_hub(
            lambda hub: hub.send_text(settled, message_id=message_id, conversation_id=where), message_id
        )

    async def _to_hub(self, func: Callable[[Hub], Awaitable[Any]], message_id: str) -> Any:
        """Run ``func(hub)`` on the server's loop and wait for it: the gateway's SendResult."""
        sent = self.svc.on_hub(func)
        if sent is None:
            return _api.SendResult(success=False, error="the LineUp server is not running")
        try:
            await asyncio.wait_for(asyncio.wrap_future(sent), SUBMIT_TIMEOUT)
        except Exception as exc:
            return _api.SendResult(success=False, error=str(exc) or type(exc).__name__)
        return _api.SendResult(success=True, message_id=message_id)

    async def send_typing(self, chat_id: str, metadata: Any = None) -> None:
        """The App shows the agent's status (``agent.status``) instead of a typing indicator."""

    async def get_chat_info(self, chat_id: str) -> dict[str, Any]:
        """The App chat is a direct chat with one user."""
        return {"name": "LineUp App", "type": "dm"}

    async def send_clarify(
        self,
        chat_id: str,
        question: str,
        choices: list[str] | None,
        clarify_id: str,
        session_key: str,
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        """Hermes' clarify as a ``choice`` card (``input`` without choices); the answer resolves it."""
        name, arguments = clarify_card(question, choices)
        return self._card(chat_id, name, arguments, clarify_timeout(), _ClarifyAnswer(clarify_id, session_key))

    async def send_exec_approval(
        self,
        chat_id: str,
        command: str,
        session_key: str,
        description: str = "dangerous command",
        metadata: dict[str, Any] | None = None,
        allow_permanent: bool = True,
        smart_denied: bool = False,
    ) -> Any:
        """A dangerous-command approval as a ``confirm`` card naming the command with Hermes' own
        choices (allow once, for this session, always, deny); the answer resolves it as Hermes does."""
        arguments = approval_card(command, description, allow_permanent=allow_permanent, smart_denied=smart_denied)
        offered = [str(c["value"]) for c in arguments["choices"]]
        return self._card(chat_id, "confirm", arguments, approval_timeout(), _ApprovalAnswer(session_key, offered))

    def _card(self, chat_id: str, name: str, arguments: dict[str, Any], deadline: float, answer: Answer) -> Any:
        if not self.svc.app_connected:
            return _api.SendResult(success=False, error="no LineUp App is connected")
        call_id = codec.new_id("call")
        where = app_conversation(chat_id)
        if self.svc.on_hub(lambda hub: ask(hub, name, arguments, deadline, call_id, answer, where)) is None:
            return _api.SendResult(success=False, error="the LineUp server is not running")
        return _api.SendResult(success=True, message_id=call_id)

    # App → gateway -----------------------------------------------------------------------

    def deliver_text(
        self, text: str, sender: str, files: Sequence[StoredFile] = (), conversation_id: str | None = None
    ) -> bool:
        """Thread-safe: App text (and the files sent with it) as a gateway message of the App user's session.

        Each App conversation is a chat of its own (the default one is :data:`APP_CHAT`), so a
        conversation started in the App is a new Hermes session.
        """
        return self.submit_text(text, sender, files, conversation_id) is not None

    def submit_text(
        self, text: str, sender: str, files: Sequence[StoredFile] = (), conversation_id: str | None = None
    ) -> concurrent.futures.Future[None] | None:
        """Like :meth:`deliver_text`; the future is done once the gateway has taken the message in.

        For a command such as ``/stop`` that is when the command has run. None when the gateway
        is not running.
        """
        loop = self._loop
        if loop is None or loop.is_closed() or not compat.takes_messages(self):
            return None
        message = self._message(text, sender, list(files), app_chat(conversation_id))
        return asyncio.run_coroutine_threadsafe(message, loop)

    async def _message(self, text: str, sender: str, files: list[StoredFile], chat_id: str = APP_CHAT) -> None:
        """One gateway message in chat ``chat_id``; files are copied where Hermes keeps media (``media_urls``)."""
        media = [await asyncio.to_thread(_cached, file) for file in files]
        kinds = {kind for _, _, kind in media}
        message_type = _api.MessageType.TEXT
        if kinds:
            message_type = _api.MessageType.PHOTO if kinds == {"image"} else _api.MessageType.DOCUMENT
        source = self.build_source(
            chat_id=chat_id,
            chat_name="LineUp App" if chat_id == APP_CHAT else f"LineUp App ({chat_id})",
            chat_type="dm",
            user_id=APP_USER,
            user_name=sender,
        )
        event = _api.MessageEvent(
            text=text,
            message_type=message_type,
            source=source,
            message_id=codec.new_id("msg"),
            timestamp=datetime.now(),
            media_urls=[path for path, _, _ in media],
            media_types=[mime for _, mime, _ in media],
        )
        await self.handle_message(event)

    # agent files → App -------------------------------------------------------------------

    async def send_image_file(
        self,
        chat_id: str,
        image_path: str,
        caption: str | None = None,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """An image the agent made or found: shown in the App (kept in LineUp's media store)."""
        return await self._send_file(image_path, caption, None)

    async def send_document(
        self,
        chat_id: str,
        file_path: str,
        caption: str | None = None,
        file_name: str | None = None,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """A file from the agent: a download in the App."""
        return await self._send_file(file_path, caption, file_name)

    async def send_video(self, chat_id: str, video_path: str, caption: str | None = None, **kwargs: Any) -> Any:
        """A video from the agent: a download in the App."""
        return await self._send_file(video_path, caption, None)

    async def _send_file(self, path: str, caption: str | None, name: str | None) -> Any:
        limit = self.svc.settings.max_file_bytes
        try:
            data = await asyncio.to_thread(_read_bounded, Path(path), limit)
        except (OSError, MediaError) as exc:
            log.warning("lineup: cannot send %s to the App: %s", Path(path).name, exc)
            return _api.SendResult(success=False, error=str(exc))
        name = name or Path(path).name
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        message_id = codec.new_id("msg")
        return await self._to_hub(lambda hub: hub.send_file(caption or "", data, name, mime), message_id)


def _cached(file: StoredFile) -> tuple[str, str, str]:
    """``file`` where Hermes keeps platform media: ``(path, media type, kind)``."""
    return compat.cache_media(file.path.read_bytes(), file.name, file.mime)


def _read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of ``path``; MediaError when it is larger than ``limit``."""
    with path.open("rb") as source:
        data = source.read(limit + 1)
    if len(data) > limit:
        raise MediaError("file_too_large", f"{path.name} is larger than {limit:,} bytes")
    return data


class _ClarifyAnswer(Answer):
    def __init__(self, clarify_id: str, session_key: str) -> None:
        self.clarify_id = clarify_id
        self.session_key = session_key

    def resolve(self, result: ToolResult) -> None:
        compat.resolve_clarify(self.clarify_id, clarify_answer(result))

    def settled(self) -> bool:
        return not compat.clarify_pending(self.clarify_id, self.session_key)


class _ApprovalAnswer(Answer):
    def __init__(self, session_key: str, offered: list[str]) -> None:
        self.session_key = session_key
        self.offered = offered

    def resolve(self, result: ToolResult) -> None:
        choice = approval_choice(result, self.offered)
        if choice is not None:
            compat.resolve_approval(self.session_key, choice)

    def settled(self) -> bool:
        return not compat.approval_pending(self.session_key)
