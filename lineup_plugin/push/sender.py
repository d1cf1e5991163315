"""Sends pushes in the background with httpx: never raises to the caller, never makes a call wait.

:meth:`PushSender.submit` only queues. Each (subscription, call) has one worker that sends the
newest request queued for it, so a close queued while the card's push still waits for its turn
replaces it (and if the card's push never left, nothing is sent at all). A push service that
answers 429 (or 503 with ``Retry-After``) is not asked again before the time it named; the push
is tried again then if its ``TTL`` still allows, with the ``TTL`` that is left. 404/410 means the
subscription is gone: ``on_gone`` drops it. Anything else is logged (by the push service's
origin: the endpoint is a secret) and dropped.

The sender remembers which card pushes a push service took, for their close, until the close was
tried or the card's end has it forget them (:meth:`~PushSender.forget`: no close goes there); it
holds nothing for a card that ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .message import Delivered, Failed, Gone, PushRequest, RetryAfter, outcome
from .vapid import audience

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

#: seconds one request to a push service may take
REQUEST_TIMEOUT = 10.0
#: how often one push is tried (429s included) before it is dropped
MAX_TRIES = 4

_Key = tuple[str, str]


class PushSender:
    """Delivers :class:`~lineup_plugin.push.message.PushRequest`\\ s on the running loop.

    ``on_gone(endpoint)`` is told of a subscription the push service no longer knows; ``clock``
    and ``sleep`` are the time (tests pass fakes); ``client`` replaces the httpx client.
    """

    def __init__(
        self,
        on_gone: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.on_gone = on_gone
        self.clock = clock
        self.sleep = sleep
        self._client = client
        self._pending: dict[_Key, tuple[PushRequest, float]] = {}
        self._workers: dict[_Key, asyncio.Task[None]] = {}
        #: card pushes a push service took, by (endpoint, call id): only those get a close
        self._delivered: set[_Key] = set()
        #: cards ended with no close to send whose push was under way: forgotten when it is done
        self._forgotten: set[_Key] = set()
        #: push service origin → when it may be asked again (after a 429)
        self.blocked_until: dict[str, float] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, request: PushRequest, expires_at: float) -> None:
        """Queue ``request``, worth sending until ``expires_at`` (seconds since the epoch)."""
        key = (request.url, request.call_id)
        if request.kind == "closed" and key not in self._delivered and key not in self._workers:
            return  # no card push for this call reached the service: nothing to close
        self._pending[key] = (request, expires_at)
        if key not in self._workers:
            self._idle.clear()
            self._workers[key] = asyncio.create_task(self._work(key), name="lineup-push")

    def forget(self, endpoint: str, call_id: str | None = None) -> None:
        """No close will follow the card push of ``call_id`` (None: of every call) to ``endpoint`` (its card
        ended and the push service takes no closes, or the subscription is gone): nothing of it is kept,
        now or once a push under way is done."""
        if call_id is None:
            keys = {key for key in (*self._delivered, *self._workers) if key[0] == endpoint}
        else:
            keys = {(endpoint, call_id)}
        for key in keys:
            self._delivered.discard(key)
            if key in self._workers:
                self._forgotten.add(key)

    @property
    def closable(self) -> frozenset[tuple[str, str]]:
        """The (endpoint, call id) of the card pushes a push service took whose close is not tried yet."""
        return frozenset(self._delivered)

    async def idle(self) -> None:
        """Return once nothing is queued or being sent."""
        await self._idle.wait()

    async def aclose(self) -> None:
        """Drop what is queued, stop the workers, close the HTTP client."""
        self._pending.clear()
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _work(self, key: _Key) -> None:
        try:
            while (item := self._pending.pop(key, None)) is not None:
                request, expires_at = item
                if request.kind == "closed" and key not in self._delivered:
                    continue  # the card's push was replaced before it left
                try:
                    await self._deliver(key, request, expires_at)
                except Exception:  # a bug here must cost one push, never the agent
                    log.exception("push: sending to %s failed", audience(request.url))
                if request.kind == "closed":  # tried: delivered or not, no other close follows
                    self._delivered.discard(key)
        finally:
            del self._workers[key]
            if key in self._forgotten:
                self._forgotten.discard(key)
                self._delivered.discard(key)
            if not self._workers:
                self._idle.set()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(timeout=REQUEST_TIMEOUT, follow_redirects=False)
        return self._client

    async def _deliver(self, key: _Key, request: PushRequest, expires_at: float) -> None:
        import httpx

        origin = audience(request.url)
        for _ in range(MAX_TRIES):
            wait = self.blocked_until.get(origin, 0.0) - self.clock()
            if wait > 0:
                if self.clock() + wait >= expires_at:
                    log.info("push: %s asked to wait past the push's TTL; dropped", origin)
                    return
                await self.sleep(wait)
                if key in self._pending:
                    return  # a newer push for this call is queued: it goes instead
            left = expires_at - self.clock()
            headers = {**request.headers, "TTL": str(max(0, int(left)))}
            try:
                answer = await self._http().post(request.url, content=request.body, headers=headers)
            except httpx.HTTPError as exc:
                log.warning("push: cannot reach %s: %s", origin, exc)
                return
            said = {name.lower(): value for name, value in answer.headers.items()}
            verdict = outcome(answer.status_code, said, answer.content, self.clock())
            if isinstance(verdict, Delivered):
                if request.kind == "card":
                    self._delivered.add(key)
                return
            if isinstance(verdict, Gone):
                log.info("push: %s says a subscription is gone (%d); it is dropped", origin, verdict.status)
                self._delivered.discard(key)
                self.on_gone(request.url)
                return
            if isinstance(verdict, RetryAfter):
                until = self.clock() + verdict.seconds
                self.blocked_until[origin] = max(self.blocked_until.get(origin, 0.0), until)
                log.info("push: %s asks to wait %.0f s", origin, verdict.seconds)
                continue
            assert isinstance(verdict, Failed)
            log.warning("push: %s refused a push: %s", origin, verdict.why)
            return
        log.warning("push: %s kept asking to wait; a push is dropped", origin)
