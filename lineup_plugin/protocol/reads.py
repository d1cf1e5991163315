"""What the session core reads, handed to it by the driver: it never queries a store itself.

- When it is made: :class:`Kept`, the state of the store's history (its id, its head, the
  conversations).
- For each received envelope: the driver asks :meth:`Session.wants
  <lineup_plugin.protocol.session.Session.wants>` what the store must say about it
  (:class:`Wants`: whether its id was seen, the calls it names, the history a catching-up
  device missed), reads that in one go and hands it over as :class:`Known` with the envelope.
- For the agent's inputs that name a call (``start_call``, ``answer_from``): the call as the
  store knows it, if at all; for ``recover``: the calls a previous process left pending.
- The agent's tools: :class:`Catalog` (read only; the session changes the registry through its
  output, :class:`~.outputs.DeclareTools` and :class:`~.outputs.WithdrawTools`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from .calls import Call
from .messages import ConversationInfo, HistoryEntry
from .tools import ToolDefinition


class HistoryQuery(NamedTuple):
    """At most ``limit`` history entries with a seq above ``after`` and a time not before ``oldest_at``:
    the oldest of them, or with ``before`` the newest below that seq (always read oldest first)."""

    after: int
    oldest_at: float
    limit: int
    before: int | None = None


class Wants(NamedTuple):
    """What the store must say about one received envelope before the session handles it."""

    #: whether this envelope id was handled before (None: not asked)
    envelope_id: str | None = None
    #: the calls (by id) the envelope names that are not live: how they ended, if the store knows them
    call_ids: tuple[str, ...] = ()
    #: the entries a device that names its last seq missed, or those before the oldest it shows
    history: HistoryQuery | None = None


#: an envelope the store has nothing to say about
NO_WANTS = Wants()


@dataclass(frozen=True, slots=True)
class Known:
    """What the store said about :class:`Wants`, read by the driver before the batch."""

    #: whether the envelope id was handled before (also by an earlier process)
    seen: bool = False
    #: the wanted calls the store knows
    calls: Mapping[str, Call] = field(default_factory=dict)
    #: the wanted history entries, oldest first
    history: Sequence[HistoryEntry] = ()


#: nothing known
NOTHING = Known()


@dataclass(frozen=True, slots=True)
class Kept:
    """The store's history as a new session starts on it."""

    #: the id of the history the seqs count in (a new store, a new history: seqs count from 1 again)
    history_id: str
    #: the highest seq kept (0 for none)
    head: int = 0
    #: the conversations kept, most recently active first
    conversations: Sequence[ConversationInfo] = ()


class Catalog(Protocol):
    """The agent's tools as a session reads them (a :class:`~lineup_plugin.tools.registry.Registry` adapter)."""

    def agent_tools(self) -> list[ToolDefinition]:
        """The tools an App may call on the agent (in-process tools)."""

    def runs_in_process(self, name: str) -> bool:
        """Whether ``name`` is an agent tool an App may call."""

    def check_result(self, name: str, action: str | None, result: dict[str, Any]) -> str | None:
        """None when a completed ``result`` of tool ``name`` satisfies its outputSchema, else what is wrong."""

    def complete_result(self, name: str, arguments: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """A completed ``result`` of tool ``name`` (called with ``arguments``) with what an answer in the
        seed documents' shape leaves out filled in; ``result`` itself when nothing is missing."""

    def handled_by(self, name: str) -> frozenset[str] | None:
        """The devices that can handle a call of ``name`` when only some can: those that declared it
        (a tool an App declared, which no renderer draws); None when every App renders it."""
