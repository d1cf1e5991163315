"""A synchronous driver of the session core for the protocol tests, doing what the hub does.

It reads what the core needs from fake records before each input (``wants`` then ``read``),
commits a batch's store changes to the records and applies its registry changes to a fake
catalog when the batch is taken, and offers the session's inputs and reads under one name
(``session.live_call(...)`` is ``session.calls.live(...)``), so a test reads as a scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from lineup_plugin.errors import ToolError
from lineup_plugin.protocol.calls import Call
from lineup_plugin.protocol.history import DEFAULT_RETENTION, Retention
from lineup_plugin.protocol.messages import Envelope, ToolCall, ToolDefinition, ToolResult
from lineup_plugin.protocol.outputs import Applied, Batch, Change, RegistryChange, WithdrawTools
from lineup_plugin.protocol.reads import Kept, Known, Wants
from lineup_plugin.protocol.session import Catalog, Session


class Records(Protocol):
    """What the test driver reads and writes (the fake records of the tests)."""

    def get_call(self, call_id: str) -> Call | None: ...

    def pending_calls(self) -> list[Call]: ...

    def kept(self) -> Kept: ...

    def read(self, wants: Wants) -> Known: ...

    def apply(self, changes: list[Change]) -> None: ...


class Declaring(Catalog, Protocol):
    """A catalog the tests can change (as a registry)."""

    def declare(self, source: str, tools: list[ToolDefinition]) -> list[str]: ...

    def withdraw(self, source: str) -> bool: ...


def apply_registry(catalog: Declaring, change: RegistryChange) -> Applied:
    """Apply one registry change of the core to ``catalog``, as ``RegistryCatalog.apply`` does."""
    if isinstance(change, WithdrawTools) or not change.tools:
        return Applied(changed=catalog.withdraw(change.source))
    try:
        return Applied(changed=True, skipped=tuple(catalog.declare(change.source, list(change.tools))))
    except ToolError as exc:
        return Applied(changed=False, refused=str(exc))


#: old names of the session's reads, and the part that holds each now
_PARTS = {
    "live_call": ("calls", "live"),
    "lookup": ("calls", "lookup"),
    "next_deadline": ("calls", "next_deadline"),
    "tick": ("calls", "tick"),
    "claim": ("calls", "claim"),
    "release": ("calls", "release"),
    "cancel_all": ("calls", "cancel_all"),
    "abandon": ("calls", "abandon"),
    "attached": ("devices", "attached"),
    "device_id": ("devices", "device_id"),
    "peers": ("devices", "peers"),
    "encode": ("devices", "encode"),
    "head": ("history", "head"),
    "history_id": ("history", "history_id"),
    "conversations": ("history", "conversations"),
}


class Driven:
    """A :class:`Session` with its fake records and catalog, driven as the hub drives it."""

    def __init__(
        self,
        *,
        records: Records,
        catalog: Declaring,
        clock: Callable[[], float],
        retention: Retention = DEFAULT_RETENTION,
        **options: Any,
    ) -> None:
        self.records = records
        self.catalog = catalog
        self.core: Session[Any] = Session(
            catalog=catalog, clock=clock, kept=records.kept(), retention=retention, **options
        )

    def __getattr__(self, name: str) -> Any:
        part = _PARTS.get(name)
        if part is not None:
            return getattr(getattr(self.core, part[0]), part[1])
        return getattr(self.core, name)

    def receive(self, link: Any, text: str | bytes) -> None:
        """Text arrived on ``link``: decode it, read what the core wants, hand both over."""
        message = self.core.decode(link, text)
        if message is not None:
            self.receive_envelope(link, message)

    def receive_object(self, link: Any, data: Any) -> None:
        """A parsed JSON value arrived on ``link``."""
        message = self.core.decode(link, data, parsed=True)
        if message is not None:
            self.receive_envelope(link, message)

    def receive_envelope(self, link: Any, message: Envelope) -> None:
        """An envelope arrived on ``link``."""
        self.core.receive(link, message, self.records.read(self.core.wants(link, message)))

    def _stored(self, call_id: str) -> Call | None:
        return self.core.calls.lookup(call_id) or self.records.get_call(call_id)

    def start_call(self, request: ToolCall, **options: Any) -> Call:
        """Start a call; a known id (in the records too) gives back the known call."""
        return self.core.start_call(request, known=self._stored(request.call_id), **options)

    def answer_from(self, surface: str, result: ToolResult) -> str | None:
        """An answer from a surface that is no device."""
        return self.core.answer_from(surface, result, self._stored(result.call_id))

    def recover(self, *, reclaim: float = 0.0) -> list[Call]:
        """Recover the calls the records hold pending."""
        return self.core.recover(self.records.pending_calls(), reclaim=reclaim)

    def take(self) -> Batch[Any]:
        """The batch, with the registry changes applied and what they produced in it (the records are not written)."""
        batch = self.core.take()
        while batch.registry:
            changes, batch.registry = batch.registry, []
            for change in changes:
                self.core.registry_applied(change, apply_registry(self.catalog, change))
            more = self.core.take()
            batch.changes += more.changes
            batch.registry += more.registry
            batch.messages += more.messages
            batch.ended += more.ended
            batch.events += more.events
        return batch
