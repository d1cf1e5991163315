"""MCP Apps (SEP-1865): the card of a waiting LineUp call, shown inline by the MCP host too.

Every LineUp tool links its card page (``_meta.ui.resourceUri`` = ``ui://lineup/card/<tool>``, and
the earlier drafts' flat ``_meta["ui/resourceUri"]``; read with ``resources/read``: :mod:`.view`).
A host that renders MCP Apps shows it while the ``tools/call`` waits; the page asks, through the
host, two tools only such a host sees (``_meta.ui.visibility: ["app"]``, listed only to clients
that negotiated the
``io.modelcontextprotocol/ui`` extension):

- ``lineup_card {tool, arguments, request_id?}``: which LineUp call the page stands for.
  :class:`HostCards` knows the ``tools/call`` requests of this server that wait (tool,
  arguments, JSON-RPC id) and finds the live call they made. ``request_id`` is the id of the
  host's ``tools/call`` the page stands for (the host gives it to the page as
  ``hostContext.toolInfo.id``): the page gets the call that request made (the runtime is told
  each request's call id as it is made), so two identical calls made at once each get their
  own card. Without it (an older host), the newest call of that tool with those
  arguments created since the request came. It answers the call's ``tool.call`` payload, and
  only such calls can be answered from a host: a card the server never showed there (another
  runtime's call, a high-risk tool's approval) cannot be answered through it.
- ``lineup_answer {call_id, status, result}``: the user's answer, applied like an App device's
  (:meth:`~lineup_plugin.hub.Hub.answer_from`): the first answer wins, the phone's card is
  dismissed ("answered on another device"), a ``completed`` answer must fit the tool's
  ``outputSchema``, and what the store cannot write is refused. The waiting ``tools/call`` then
  ends with that answer and the host hands its result to the page.

An answer on the phone ends the ``tools/call``: the host sends the result to the page, which
dismisses its card. The host's answers are audited as device ``mcp-host``. When another process
serves the App and this one forwards its calls (:mod:`lineup_plugin.runtime.forward`), the card
is this process's forwarded call and the answer travels on its forwarding connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import ProtocolError, ToolError
from ...protocol.codec import check_storable
from ...protocol.messages import ToolResult
from ...tools.registry import split_arguments

if TYPE_CHECKING:
    from ...hub import Hub
    from ..service import LineUpService

#: the device id the host's answers are audited with
SURFACE = "mcp-host"
#: how long ``lineup_card`` waits for the call it is asked about to reach the App
FIND_TIMEOUT = 15.0
#: how long ``lineup_card`` waits for the ``tools/call`` it is asked about to arrive (hosts send both at once)
REQUEST_GRACE = 2.0
#: calls handed to hosts that are remembered for their answers
MAX_SHOWN = 1024
#: statuses an answer from a host may carry (``expired`` is the agent's to say)
ANSWER_STATUSES = ("completed", "rejected", "cancelled", "failed", "unsupported")

CARD_TOOL = "lineup_card"
ANSWER_TOOL = "lineup_answer"
#: the input schemas of the two tools for the card page
APP_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    CARD_TOOL: (
        "For the LineUp card page: the LineUp call a waiting tools/call of this host made.",
        {
            "type": "object",
            "properties": {
                "tool": {"type": "string", "maxLength": 64},
                "arguments": {"type": "object"},
                "request_id": {"type": ["string", "integer"], "maxLength": 128},
            },
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        },
    ),
    ANSWER_TOOL: (
        "For the LineUp card page: the user's answer to a LineUp call shown in this host.",
        {
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "maxLength": 128},
                "status": {"enum": list(ANSWER_STATUSES)},
                "result": {"type": "object"},
            },
            "required": ["call_id", "status", "result"],
            "additionalProperties": False,
        },
    ),
}


@dataclass(eq=False)
class _Request:
    """One waiting ``tools/call`` of this server."""

    tool: str
    arguments: str  # canonical JSON of the flat arguments
    started: float  # wall clock, as the session's call times
    #: the JSON-RPC id of the ``tools/call``, and the connection it came on (ids are per connection)
    request_id: str | int | None = None
    session: object = None
    #: the LineUp call this request made (its worker says so as the call is made)
    call_id: str | None = None
    live: threading.Event = field(default_factory=threading.Event)


def _canonical(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class HostCards:
    """The ``tools/call`` requests that wait, and the LineUp calls shown for them in hosts."""

    def __init__(self, service: LineUpService) -> None:
        self.service = service
        self._lock = threading.Lock()
        self._requests: list[_Request] = []
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: call id -> tool, for the calls handed to card pages
        self._shown: OrderedDict[str, str] = OrderedDict()

    # the waiting requests ------------------------------------------------------------------

    def started(
        self, tool: str, arguments: dict[str, Any], *, request_id: str | int | None = None, session: object = None
    ) -> _Request:
        """A ``tools/call`` of ``tool`` begins (on the MCP loop); pass the result to :meth:`finished`.

        ``request_id`` and ``session`` (its JSON-RPC id and connection) let a card page name it.
        """
        self._loop = asyncio.get_running_loop()
        request = _Request(tool, _canonical(arguments), time.time(), request_id, session)
        with self._lock:
            self._requests.append(request)
        self._changed.set()
        return request

    def beat(self, request: _Request) -> None:
        """The request's call is being waited for (a heartbeat, on its worker thread): look again."""
        if not request.live.is_set():
            request.live.set()
        self._poke()

    def bind(self, request: _Request, call_id: str) -> None:
        """The request makes LineUp call ``call_id`` (on its worker thread): its card page shows that one."""
        with self._lock:
            request.call_id = call_id
        self._poke()

    def finished(self, request: _Request) -> None:
        """The ``tools/call`` ended."""
        with self._lock:
            if request in self._requests:
                self._requests.remove(request)
        self._poke()

    def _poke(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._changed.set)

    # lineup_card -----------------------------------------------------------------------------

    async def find(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        request_id: str | int | None = None,
        session: object = None,
        timeout: float = FIND_TIMEOUT,
    ) -> dict[str, Any]:
        """The ``tool.call`` payload of the live call that a waiting ``tools/call`` of ``tool`` with
        ``arguments`` made (the one with JSON-RPC id ``request_id``, if given, on ``session`` if it
        has one there); waits up to ``timeout`` for it to reach the App."""
        wanted = _canonical(arguments)
        began = time.monotonic()
        while True:
            self._changed.clear()
            with self._lock:
                requests = [r for r in self._requests if r.tool == tool and r.arguments == wanted]
                named = self._named(requests, request_id, session)
                if named is not None:
                    requests = [named]
            if any(r.live.is_set() for r in requests):
                # a request's own call is made after it came (the same wall clock): a named one looks no earlier
                since = named.started if named is not None else min(r.started for r in requests) - 1.0
                calls: list[dict[str, Any]]
                if self.service.serving:
                    calls = await self._on_hub(lambda hub, since=since: self._live_calls(hub, tool, arguments, since))
                else:
                    calls = self._forwarded_calls(tool, arguments, since)
                call = self._choose(calls, named)
                if call is not None:
                    self._remember(call["call_id"], tool)
                    return call
            waited = time.monotonic() - began
            if not requests and waited >= REQUEST_GRACE:
                raise ToolError(f"no {tool} call with these arguments waits in this server")
            if waited >= timeout:
                raise ToolError(f"the {tool} call has not reached the App; answer it on your phone")
            left = (timeout if requests else REQUEST_GRACE) - waited
            with contextlib.suppress(TimeoutError):  # a heartbeat or a new request wakes it sooner
                await asyncio.wait_for(self._changed.wait(), left)

    @staticmethod
    def _named(requests: list[_Request], request_id: str | int | None, session: object) -> _Request | None:
        """The request a page named by its JSON-RPC id: the one on the page's own connection, else
        the only one with that id (ids are per connection)."""
        if request_id is None:
            return None
        same = [r for r in requests if r.request_id == request_id]
        own = [r for r in same if r.session is session]
        if len(own) == 1:
            return own[0]
        return same[0] if len(same) == 1 else None

    def _choose(self, calls: list[dict[str, Any]], named: _Request | None) -> dict[str, Any] | None:
        """Of the live ``calls`` (oldest first), the one for the page: without a named request the
        newest; for a named request the call bound to it, else the oldest made since it came that no
        other request holds, then bound to it."""
        if named is None:
            return calls[-1] if calls else None
        with self._lock:
            if named.call_id is not None:
                return next((c for c in calls if c["call_id"] == named.call_id), None)
            held = {r.call_id for r in self._requests if r.call_id is not None}
            mine = next((c for c in calls if c["call_id"] not in held), None)
            if mine is not None:
                named.call_id = mine["call_id"]
            return mine

    @staticmethod
    def _live_calls(hub: Hub, tool: str, arguments: dict[str, Any], since: float) -> list[dict[str, Any]]:
        """The pending calls of ``tool`` with ``arguments`` created since ``since``, oldest first."""
        registered = hub.registry.get(tool)
        if registered is None:
            return []
        action, split = split_arguments(registered.definition, arguments)
        return [
            call.request.model_dump(mode="json", by_alias=True, exclude_none=True)
            for call in hub.session.calls.all()  # the store's pending calls, as the session holds them
            if (call.request.name, call.request.action, call.request.arguments) == (tool, action, split)
            and call.created_at >= since
        ]

    def _forwarded_calls(self, tool: str, arguments: dict[str, Any], since: float) -> list[dict[str, Any]]:
        """The calls of ``tool`` with ``arguments`` this process forwarded (another one serves), oldest first."""
        registered = self.service.registry.get(tool)
        if registered is None:
            return []
        action, split = split_arguments(registered.definition, arguments)
        wanted = _canonical(arguments)
        found = sorted(
            (forwarded.started, call_id)
            for call_id, forwarded in self.service.forwarder.open_calls().items()
            if forwarded.name == tool and _canonical(forwarded.arguments) == wanted and forwarded.started >= since
        )
        payloads: list[dict[str, Any]] = []
        for _, call_id in found:
            payload: dict[str, Any] = {"call_id": call_id, "name": tool, "arguments": split}
            if action is not None:
                payload["action"] = action
            payloads.append(payload)
        return payloads

    def _remember(self, call_id: str, tool: str) -> None:
        with self._lock:
            self._shown[call_id] = tool
            self._shown.move_to_end(call_id)
            while len(self._shown) > MAX_SHOWN:
                self._shown.popitem(last=False)

    # lineup_answer ----------------------------------------------------------------------------

    async def answer(self, call_id: str, status: str, result: Any) -> None:
        """Apply the host's answer to a call it was shown; raises ToolError saying why not."""
        with self._lock:
            tool = self._shown.get(call_id)
        if tool is None:
            raise ToolError(f"call {call_id!r} was not shown in this host; it cannot be answered here")
        if status not in ANSWER_STATUSES or not isinstance(result, dict):
            raise ToolError(f"an answer is a status ({', '.join(ANSWER_STATUSES)}) and a result object")
        try:
            check_storable(result, "result")
        except ProtocolError as exc:
            raise ToolError(f"the answer was refused: {exc}") from None

        async def apply(hub: Hub) -> str | None:
            call = hub.store.get_call(call_id)
            action = call.request.action if call is not None else None
            answer = ToolResult(call_id=call_id, name=tool, action=action, status=status, result=result)  # type: ignore[arg-type]
            return await hub.answer_from(SURFACE, answer)

        if not self.service.serving:  # our forwarded call: the serving process applies it (or refuses it)
            answer = ToolResult(call_id=call_id, name=tool, status=status, result=result)  # type: ignore[arg-type]
            if not self.service.forwarder.answer(call_id, answer, SURFACE):
                raise ToolError(f"call {call_id!r} waits no more; it was answered or withdrawn")
            return
        refused = await self._on_hub(apply)
        if refused is not None:
            raise ToolError(refused)

    async def _on_hub(self, func: Any) -> Any:
        """``func(hub)`` (sync or async) on the hub's loop; ToolError when this process serves no App."""

        async def run(hub: Hub) -> Any:
            value = func(hub)
            return await value if asyncio.iscoroutine(value) else value

        future = self.service.on_hub(run)
        if future is None:
            raise ToolError("this process does not serve the LineUp App; answer on your phone")
        return await asyncio.wrap_future(future)
