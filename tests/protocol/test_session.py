"""The sans-I/O session core, driven by method calls with a fake clock, fake records and a fake catalog.

Every test feeds a :class:`Session` inputs, takes what it produced with :func:`drain` (which also
commits the batch's store changes to the fake records, as the hub does before sending) and looks
at the batch: store changes, messages per link (decoded back to envelopes), ended calls, events.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import Call, CallState, format_timestamp
from lineup_plugin.protocol.history import DEFAULT_RETENTION, Retention
from lineup_plugin.protocol.messages import (
    Actor,
    AgentStop,
    CallOutcome,
    DeviceHello,
    DeviceWelcome,
    Envelope,
    Error,
    History,
    Payload,
    PushSubscribe,
    Text,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
)
from lineup_plugin.protocol.outputs import PushSubscribed
from lineup_plugin.protocol.reads import Kept, Known, Wants
from lineup_plugin.protocol.session import (
    ANSWERED_ELSEWHERE,
    AUTH_FAILED,
    BAD_HELLO,
    EXPIRED,
    NO_APP,
    RESTARTED,
    Audit,
    Batch,
    Change,
    CloseLink,
    DevicesChanged,
    SaveCall,
    SeenEnvelope,
    Send,
    StopRequested,
    TextReceived,
    ToolsChanged,
    closed_reason,
)
from lineup_plugin.protocol.tools import ToolDefinition
from lineup_plugin.store import MemoryStore

from .driver import Driven

START = 1_700_000_000.0

# ------------------------------------------------------------------------------------ fakes


class FakeClock:
    """Seconds since the epoch that move only when a test moves them."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeRecords:
    """The store as a session reads it: dicts, changed only by :meth:`apply` (like a commit).

    Like the real store it hands out copies and never changes a call that already ended.
    """

    def __init__(
        self, calls: Iterable[Call] = (), seen: Iterable[str] = (), retention: Retention = DEFAULT_RETENTION
    ) -> None:
        self.calls: dict[str, Call] = {call.call_id: copy.deepcopy(call) for call in calls}
        self.seen: set[str] = set(seen)
        self.audits: list[Audit] = []
        #: the history is kept as the memory store keeps it (tested against SQLite in tests/test_store.py)
        self.history = MemoryStore(retention=retention)
        self.history_id = self.history.history_id
        self.history_head = self.history.history_head
        self.history_after = self.history.history_after
        self.conversations = self.history.conversations

    def get_call(self, call_id: str) -> Call | None:
        call = self.calls.get(call_id)
        return copy.deepcopy(call) if call is not None else None

    def pending_calls(self) -> list[Call]:
        live = [call for call in self.calls.values() if not call.done]
        return [copy.deepcopy(call) for call in sorted(live, key=lambda call: call.created_at)]

    def was_seen(self, envelope_id: str) -> bool:
        return envelope_id in self.seen

    def kept(self) -> Kept:
        return self.history.kept()

    def read(self, wants: Wants) -> Known:
        envelope_id, call_ids, query = wants
        calls = {call_id: call for call_id in call_ids if (call := self.get_call(call_id)) is not None}
        history = self.history.history(query) if query else []
        return Known(envelope_id is not None and self.was_seen(envelope_id), calls, history)

    def apply(self, changes: Iterable[Change]) -> None:
        for change in changes:
            if isinstance(change, SaveCall):
                known = self.calls.get(change.call.call_id)
                if known is None or not known.done:
                    self.calls[change.call.call_id] = copy.deepcopy(change.call)
            elif isinstance(change, SeenEnvelope):
                self.seen.add(change.envelope_id)
            elif isinstance(change, Audit):
                self.audits.append(change)
            else:
                self.history.apply([change])


AGENT_TOOLS = [ToolDefinition(name="lookup", type="action", description="look something up")]
APP_TOOLS = [ToolDefinition(name="camera", type="action", description="take a photo")]


@dataclass
class FakeCatalog:
    """A fixed list of agent tools, and the tools each App source declared."""

    declared: dict[str, list[ToolDefinition]] = field(default_factory=dict)

    def agent_tools(self) -> list[ToolDefinition]:
        return list(AGENT_TOOLS)

    def runs_in_process(self, name: str) -> bool:
        return any(tool.name == name for tool in AGENT_TOOLS)

    def declare(self, source: str, tools: list[ToolDefinition]) -> list[str]:
        skipped = [tool.name for tool in tools if self.runs_in_process(tool.name)]
        self.declared[source] = [tool for tool in tools if tool.name not in skipped]
        return skipped

    def withdraw(self, source: str) -> bool:
        return bool(self.declared.pop(source, None))

    def check_result(self, name: str, action: str | None, result: dict[str, Any]) -> str | None:
        return None  # outputSchemas are the registry's: see tests/test_tool_hardening.py

    def complete_result(self, name: str, arguments: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        return result

    def handled_by(self, name: str) -> frozenset[str] | None:
        owners = [
            source.removeprefix("app:") for source, tools in self.declared.items() if any(t.name == name for t in tools)
        ]
        return frozenset(owners) if owners else None


# ---------------------------------------------------------------------------------- helpers


def drain(session: Driven, records: FakeRecords) -> Batch[str]:
    """Take the session's batch, commit its changes to ``records`` (as a driver must first), return it."""
    batch = session.take()
    records.apply(batch.changes)
    return batch


def accept(hello: DeviceHello) -> str | None:
    return None


def refuse_with(reason: str) -> Callable[[DeviceHello], str | None]:
    def verify(hello: DeviceHello) -> str | None:
        return reason

    return verify


@dataclass
class Rig:
    """One session with its fakes."""

    clock: FakeClock = field(default_factory=FakeClock)
    records: FakeRecords = field(default_factory=FakeRecords)
    catalog: FakeCatalog = field(default_factory=FakeCatalog)
    session: Driven = field(init=False)

    def __post_init__(self) -> None:
        self.session = Driven(records=self.records, catalog=self.catalog, clock=self.clock)

    @classmethod
    def keeping(cls, retention: Retention) -> Rig:
        """A rig whose session and records keep the history by ``retention``."""
        records = FakeRecords(retention=retention)
        rig = cls(records=records)
        rig.session = Driven(records=records, catalog=rig.catalog, clock=rig.clock, retention=retention)
        return rig

    def drain(self) -> Batch[str]:
        return drain(self.session, self.records)

    def text_from(self, device_id: str, payload: Payload, *, envelope_id: str | None = None) -> str:
        """The wire text of ``payload`` sent by the App on ``device_id`` to this session's agent."""
        message = codec.envelope(
            payload,
            sender=Actor(kind="device", id=device_id),
            target=self.session.agent,
            conversation_id=self.session.conversation_id,
            id=envelope_id,
        )
        return codec.encode(message)

    def send(self, link: str, payload: Payload, *, envelope_id: str | None = None) -> Batch[str]:
        """The App on ``link`` (device id = link name) sends ``payload``; returns the drained batch."""
        self.session.receive(link, self.text_from(link, payload, envelope_id=envelope_id))
        return self.drain()

    def connect(self, link: str, *, open_calls: Iterable[str] = ()) -> Batch[str]:
        """Open ``link`` with a verifier that accepts, say hello as device ``link``; the drained batch."""
        self.session.open(link, name=link, verify=accept)
        return self.send(link, DeviceHello(device_id=link, open_calls=list(open_calls)))

    def vouch(self, link: str, device_id: str | None = None) -> Batch[str]:
        """Open ``link`` as a link its transport vouches for; the drained batch."""
        self.session.open(link, name=link, device_id=device_id or link)
        return self.drain()

    def start(self, call_id: str = "c1", *, wait: float = 30.0, name: str = "choice") -> tuple[Call, Batch[str]]:
        """The agent starts a call; the call and the drained batch."""
        call = self.session.start_call(
            ToolCall(call_id=call_id, name=name, arguments={"options": ["a", "b"]}), wait=wait
        )
        return call, self.drain()


def sent(batch: Batch[str], link: str) -> list[Envelope]:
    """The envelopes ``batch`` sends on ``link``, decoded, in order."""
    return [codec.decode(m.text) for m in batch.messages if isinstance(m, Send) and m.link == link]


def kinds(batch: Batch[str], link: str) -> list[str]:
    return [message.kind for message in sent(batch, link)]


def payloads(batch: Batch[str], link: str, kind: type[Payload]) -> list[Payload]:
    return [message.payload for message in sent(batch, link) if isinstance(message.payload, kind)]


def errors(batch: Batch[str], link: str) -> list[Error]:
    return [p for p in payloads(batch, link, Error) if isinstance(p, Error)]


def cancels(batch: Batch[str], link: str) -> list[ToolCancel]:
    return [p for p in payloads(batch, link, ToolCancel) if isinstance(p, ToolCancel)]


def closes(batch: Batch[str]) -> list[CloseLink[str]]:
    return [m for m in batch.messages if isinstance(m, CloseLink)]


def saved_ids(batch: Batch[str]) -> set[str]:
    return {change.call.call_id for change in batch.changes if isinstance(change, SaveCall)}


def audits(batch: Batch[str]) -> list[Audit]:
    return [change for change in batch.changes if isinstance(change, Audit)]


def result(call_id: str = "c1", selected: str = "a", status: str = "completed") -> ToolResult:
    return ToolResult.model_validate({"call_id": call_id, "status": status, "result": {"selected": selected}})


# -------------------------------------------------------------------------------- handshake


def test_verified_link_that_does_not_say_hello_first_is_refused_hello_required_and_closed_4400() -> None:
    rig = Rig()
    rig.session.open("phone", name="phone", verify=accept)
    assert not rig.drain()  # nothing is said before the App's hello

    batch = rig.send("phone", Text(text="hi"))

    [error] = errors(batch, "phone")
    assert error.code == "hello_required"
    assert closes(batch) == [CloseLink("phone", BAD_HELLO, "device.hello required")]
    assert isinstance(batch.messages[-1], CloseLink)  # the error is sent before the close
    assert not rig.session.attached("phone")
    assert batch.events == []  # the text was not handed to the runtime


def test_hello_the_verifier_refuses_is_told_auth_failed_with_its_reason_closed_4401_and_not_attached() -> None:
    rig = Rig()
    rig.session.open("phone", name="phone", verify=refuse_with("bad token"))

    batch = rig.send("phone", DeviceHello(device_id="phone", token="wrong"))

    [error] = errors(batch, "phone")
    assert (error.code, error.message) == ("auth_failed", "bad token")
    assert closes(batch) == [CloseLink("phone", AUTH_FAILED, "bad token")]
    assert not rig.session.attached("phone")
    assert rig.session.peers == []
    assert not any(isinstance(event, DevicesChanged) for event in batch.events)
    # the refused link is gone: what it says next is ignored
    assert not rig.send("phone", DeviceHello(device_id="phone"))


def test_accepted_hello_gets_welcome_then_tool_list_then_status_in_that_order() -> None:
    rig = Rig()

    batch = rig.connect("phone")

    assert kinds(batch, "phone") == ["device.welcome", "tool.list", "agent.status"]
    welcome, tools, _ = (message.payload for message in sent(batch, "phone"))
    assert isinstance(welcome, DeviceWelcome)
    assert (welcome.device_id, welcome.agent, welcome.pending) == ("phone", rig.session.agent, 0)
    assert isinstance(tools, ToolList)
    assert [tool.name for tool in tools.tools] == ["lookup"]
    assert closes(batch) == []
    assert rig.session.attached("phone")
    assert rig.session.device_id("phone") == "phone"
    assert DevicesChanged("phone", attached=True) in batch.events


def test_second_hello_on_a_verified_link_is_refused_already_connected() -> None:
    rig = Rig()
    rig.connect("phone")

    batch = rig.send("phone", DeviceHello(device_id="phone"), envelope_id="hello-2")

    assert kinds(batch, "phone") == ["error"]
    [error] = errors(batch, "phone")
    assert (error.code, error.ref) == ("already_connected", "hello-2")
    assert closes(batch) == []
    assert rig.session.attached("phone")


def test_vouched_link_is_attached_at_once_without_a_hello() -> None:
    rig = Rig()

    batch = rig.vouch("im-chat", device_id="user-42")

    assert rig.session.attached("im-chat")
    assert rig.session.device_id("im-chat") == "user-42"
    assert kinds(batch, "im-chat") == ["device.welcome", "tool.list", "agent.status"]
    assert DevicesChanged("user-42", attached=True) in batch.events


def test_each_hello_on_a_vouched_link_resyncs_it_with_a_welcome_and_the_live_calls() -> None:
    rig = Rig()
    rig.vouch("im-chat", device_id="user-42")
    rig.start("c1")

    for envelope_id in ("hello-1", "hello-2"):
        batch = rig.send("im-chat", DeviceHello(device_id="user-42"), envelope_id=envelope_id)

        assert kinds(batch, "im-chat") == ["device.welcome", "tool.list", "agent.status", "tool.call"]
        welcome = sent(batch, "im-chat")[0].payload
        assert isinstance(welcome, DeviceWelcome) and welcome.pending == 1
        [call] = payloads(batch, "im-chat", ToolCall)
        assert isinstance(call, ToolCall) and call.call_id == "c1"
        assert errors(batch, "im-chat") == []


def test_vouched_link_keeps_the_device_id_its_transport_vouched_for_whatever_its_hello_says() -> None:
    rig = Rig()
    rig.vouch("im-chat", device_id="user-42")

    batch = rig.send("im-chat", DeviceHello(device_id="someone-else"))

    assert rig.session.device_id("im-chat") == "user-42"
    welcome = sent(batch, "im-chat")[0].payload
    assert isinstance(welcome, DeviceWelcome) and welcome.device_id == "user-42"


def test_bad_json_before_hello_is_refused_bad_message_and_closed_4400() -> None:
    rig = Rig()
    rig.session.open("phone", name="phone", verify=accept)

    rig.session.receive("phone", "{not json")
    batch = rig.drain()

    [error] = errors(batch, "phone")
    assert error.code == "bad_message"
    [close] = closes(batch)
    assert close.code == BAD_HELLO
    assert not rig.session.attached("phone")


def test_bad_json_after_attach_is_answered_bad_message_and_the_link_stays() -> None:
    rig = Rig()
    rig.connect("phone")

    rig.session.receive("phone", "{not json")
    batch = rig.drain()

    assert [error.code for error in errors(batch, "phone")] == ["bad_message"]
    assert closes(batch) == []
    assert rig.session.attached("phone")


def _with_version(text: str, version: int) -> str:
    data = json.loads(text)
    data["v"] = version
    return json.dumps(data)


def test_wrong_protocol_version_before_hello_is_refused_unsupported_version_and_closed() -> None:
    rig = Rig()
    rig.session.open("phone", name="phone", verify=accept)

    rig.session.receive("phone", _with_version(rig.text_from("phone", DeviceHello(device_id="phone")), 2))
    batch = rig.drain()

    [error] = errors(batch, "phone")
    assert error.code == "unsupported_version"
    assert [close.code for close in closes(batch)] == [BAD_HELLO]
    assert not rig.session.attached("phone")


def test_wrong_protocol_version_after_attach_is_answered_unsupported_version_and_not_applied() -> None:
    rig = Rig()
    rig.connect("phone")

    rig.session.receive("phone", _with_version(rig.text_from("phone", Text(text="hi")), 2))
    batch = rig.drain()

    assert [error.code for error in errors(batch, "phone")] == ["unsupported_version"]
    assert batch.events == []
    assert closes(batch) == []


# ------------------------------------------------------------------------------- redelivery


def test_live_call_is_sent_to_a_device_that_attaches_later() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")

    batch = rig.connect("laptop")

    assert kinds(batch, "laptop") == ["device.welcome", "tool.list", "agent.status", "tool.call"]
    welcome = sent(batch, "laptop")[0].payload
    assert isinstance(welcome, DeviceWelcome) and welcome.pending == 1
    [call] = payloads(batch, "laptop", ToolCall)
    assert isinstance(call, ToolCall) and call.call_id == "c1"
    assert call.expires_at == format_timestamp(START + 30.0)
    assert sent(batch, "phone") == []  # the phone has it already


def test_reconnect_with_open_calls_of_ended_or_unknown_calls_gets_tool_cancel_with_how_they_ended() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("done")
    rig.start("live")
    rig.send("phone", result("done"))
    rig.session.close("phone")
    rig.drain()

    batch = rig.connect("phone", open_calls=["done", "live", "never-heard-of"])

    by_call = {cancel.call_id: cancel.reason for cancel in cancels(batch, "phone")}
    assert by_call == {
        "done": closed_reason(rig.records.get_call("done")),
        "never-heard-of": closed_reason(None),
    }
    assert by_call["done"] == "this call already ended (completed)"
    assert by_call["never-heard-of"] == "the agent no longer knows this call"
    # the live one is not cancelled: it is sent again
    assert [p.call_id for p in payloads(batch, "phone", ToolCall) if isinstance(p, ToolCall)] == ["live"]


# ----------------------------------------------------------------------------------- expiry


def test_next_deadline_is_the_earliest_live_deadline() -> None:
    rig = Rig()
    assert rig.session.next_deadline() is None
    rig.connect("phone")
    rig.start("slow", wait=60.0)
    rig.start("quick", wait=10.0)
    rig.start("middle", wait=30.0)

    assert rig.session.next_deadline() == START + 10.0

    rig.session.cancel_call("quick")
    rig.drain()
    assert rig.session.next_deadline() == START + 30.0  # an ended call's deadline no longer counts

    rig.send("phone", result("middle"))
    rig.send("phone", result("slow"))
    assert rig.session.next_deadline() is None


def test_tick_before_the_deadline_ends_nothing() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1", wait=30.0)

    rig.clock.advance(29.999)

    assert rig.session.tick() == 0
    assert not rig.drain()
    assert rig.session.live_call("c1") is not None


def test_call_expires_when_the_clock_passes_its_deadline_and_every_device_is_told() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("laptop")
    rig.start("c1", wait=30.0)
    rig.start("later", wait=90.0)

    rig.clock.advance(30.5)
    assert rig.session.tick() == 1
    batch = rig.drain()

    [ended] = batch.ended
    assert ended.call_id == "c1"
    assert ended.state is CallState.EXPIRED
    assert ended.result is not None and ended.result.result == {"message": EXPIRED}
    for link in ("phone", "laptop"):
        assert [(c.call_id, c.reason) for c in cancels(batch, link)] == [
            ("c1", "expired: no answer before the deadline")
        ]
    assert "c1" in saved_ids(batch)
    assert rig.records.calls["c1"].state is CallState.EXPIRED  # committed by the batch
    assert rig.session.live_call("c1") is None
    assert rig.session.live_call("later") is not None
    assert rig.session.next_deadline() == START + 90.0


def test_answer_after_expiry_is_refused_call_closed() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1", wait=30.0)
    rig.clock.advance(31.0)
    rig.session.tick()
    rig.drain()

    batch = rig.send("phone", result("c1"), envelope_id="late")

    [error] = errors(batch, "phone")
    assert (error.code, error.call_id, error.ref) == ("call_closed", "c1", "late")
    assert batch.ended == []
    assert rig.records.calls["c1"].state is CallState.EXPIRED


# ------------------------------------------------------------------------------------ dedupe


def test_same_envelope_id_twice_is_applied_once() -> None:
    rig = Rig()
    rig.connect("phone")

    first = rig.send("phone", Text(text="hello"), envelope_id="msg-1")
    second = rig.send("phone", Text(text="hello"), envelope_id="msg-1")

    assert first.events == [TextReceived("phone", "hello", ref="msg-1")]
    assert SeenEnvelope("msg-1", START) in first.changes
    assert second.events == []
    assert second.messages == []
    assert Audit("duplicate.envelope", None, "phone", "msg-1", START) in second.changes


def test_same_answer_envelope_twice_in_one_batch_is_applied_once() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")
    text = rig.text_from("phone", result("c1"), envelope_id="answer-1")

    rig.session.receive("phone", text)
    rig.session.receive("phone", text)
    batch = rig.drain()

    assert [call.call_id for call in batch.ended] == ["c1"]
    assert [a.event for a in audits(batch)].count("call.completed") == 1
    assert Audit("duplicate.envelope", None, "phone", "answer-1", START) in batch.changes


def test_envelope_id_an_earlier_process_saw_is_dropped() -> None:
    rig = Rig(records=FakeRecords(seen=["msg-old"]))
    rig.connect("phone")

    batch = rig.send("phone", Text(text="hello again"), envelope_id="msg-old")

    assert batch.events == []
    assert batch.messages == []
    assert Audit("duplicate.envelope", None, "phone", "msg-old", START) in batch.changes


def test_same_answer_resent_in_a_new_envelope_after_the_call_ended_is_silently_accepted() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")
    rig.send("phone", result("c1", "a"), envelope_id="answer-1")

    batch = rig.send("phone", result("c1", "a"), envelope_id="answer-1-again")

    assert batch.messages == []
    assert batch.ended == []
    assert not any(a.event == "result.refused" for a in audits(batch))
    assert rig.records.calls["c1"].result is not None
    assert rig.records.calls["c1"].result.result == {"selected": "a"}


def test_an_answer_that_ends_its_call_is_kept_by_the_call_not_by_its_envelope_id() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")

    applied = rig.send("phone", result("c1", "a"), envelope_id="answer-1")
    again = rig.send("phone", result("c1", "a"), envelope_id="answer-1")  # the same envelope, another batch
    refused = rig.send("phone", result("c1", "b"), envelope_id="changed-mind")
    refused_again = rig.send("phone", result("c1", "b"), envelope_id="changed-mind")

    assert [c for c in applied.changes if isinstance(c, SeenEnvelope)] == []  # no row for the store to write
    assert again.messages == [] and again.ended == []  # met the ended call: the same answer, silently
    assert SeenEnvelope("changed-mind", START) in refused.changes  # a refused answer is kept by its id
    assert refused_again.messages == []
    assert Audit("duplicate.envelope", None, "phone", "changed-mind", START) in refused_again.changes


def test_different_late_answer_is_refused_call_closed() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")
    rig.send("phone", result("c1", "a"))

    batch = rig.send("phone", result("c1", "b"), envelope_id="changed-mind")

    [error] = errors(batch, "phone")
    assert (error.code, error.call_id, error.ref) == ("call_closed", "c1", "changed-mind")
    assert any(a.event == "result.refused" and a.call_id == "c1" for a in audits(batch))
    assert rig.records.calls["c1"].result is not None
    assert rig.records.calls["c1"].result.result == {"selected": "a"}  # the first answer stands


# -------------------------------------------------------------------------- first answer wins


def test_first_answer_wins_and_every_device_is_told_the_verdict_with_the_device_that_gave_it() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("laptop")
    _, started = rig.start("c1")
    assert kinds(started, "phone") == kinds(started, "laptop") == ["tool.call"]

    batch = rig.send("phone", result("c1", "a"))

    [ended] = batch.ended
    assert (ended.call_id, ended.state) == ("c1", CallState.COMPLETED)
    assert ended.result is not None and ended.result.result == {"selected": "a"}
    assert [(c.call_id, c.reason) for c in cancels(batch, "laptop")] == [("c1", ANSWERED_ELSEWHERE)]
    verdict = CallOutcome(status="completed", result={"selected": "a"}, device_id="phone")
    assert [c.outcome for c in cancels(batch, "laptop")] == [c.outcome for c in cancels(batch, "phone")] == [verdict]


def test_second_answer_from_the_other_device_is_refused_call_closed() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("laptop")
    rig.start("c1")
    rig.send("phone", result("c1", "a"))

    batch = rig.send("laptop", result("c1", "b"))

    [error] = errors(batch, "laptop")
    assert (error.code, error.call_id) == ("call_closed", "c1")
    assert sent(batch, "phone") == []
    assert batch.ended == []
    assert rig.records.calls["c1"].result is not None
    assert rig.records.calls["c1"].result.result == {"selected": "a"}


def test_an_answer_from_another_surface_wins_and_every_device_is_told_answered_elsewhere() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("laptop")
    rig.start("c1")

    assert rig.session.answer_from("mcp-host", result("c1", "b")) is None
    batch = rig.drain()

    [ended] = batch.ended
    assert ended.state == CallState.COMPLETED and ended.result is not None and ended.result.result == {"selected": "b"}
    for device in ("phone", "laptop"):
        assert [(c.call_id, c.reason) for c in cancels(batch, device)] == [("c1", ANSWERED_ELSEWHERE)]
    assert [(a.event, a.device_id) for a in audits(batch)] == [("call.completed", "mcp-host")]


def test_an_answer_from_another_surface_after_a_device_answered_is_refused_saying_how_it_ended() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")
    rig.send("phone", result("c1", "a"))

    refused = rig.session.answer_from("mcp-host", result("c1", "b"))

    assert refused == "this call already ended as completed; this answer was not applied"  # no call id
    unknown = "the agent does not know this call (any more); the answer was not applied"
    assert rig.session.answer_from("mcp-host", result("nope")) == unknown
    batch = rig.drain()
    assert batch.ended == [] and sent(batch, "phone") == []
    assert rig.records.calls["c1"].result is not None and rig.records.calls["c1"].result.result == {"selected": "a"}


# ----------------------------------------------------------------------------------- cancel


def test_agent_cancel_tells_every_device_with_the_reason_and_ends_the_call_cancelled() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("laptop")
    rig.start("c1")

    assert rig.session.cancel_call("c1", "the user changed the topic")
    batch = rig.drain()

    for link in ("phone", "laptop"):
        assert [(c.call_id, c.reason) for c in cancels(batch, link)] == [("c1", "the user changed the topic")]
    [ended] = batch.ended
    assert ended.state is CallState.CANCELLED
    assert ended.result is not None and ended.result.result == {"message": "the user changed the topic"}
    assert rig.records.calls["c1"].state is CallState.CANCELLED
    assert not rig.session.cancel_call("c1")  # not live any more


def test_cancel_all_cancels_every_live_call() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")
    rig.start("c2")

    assert rig.session.cancel_all("stopped") == 2
    batch = rig.drain()

    assert sorted((call.call_id, call.state) for call in batch.ended) == [
        ("c1", CallState.CANCELLED),
        ("c2", CallState.CANCELLED),
    ]
    assert sorted((c.call_id, c.reason) for c in cancels(batch, "phone")) == [("c1", "stopped"), ("c2", "stopped")]


def test_app_cancel_ends_the_call_cancelled_with_the_apps_reason_and_tells_the_other_devices() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("laptop")
    rig.start("c1")

    batch = rig.send("phone", ToolCancel(call_id="c1", reason="not now"))

    [ended] = batch.ended
    assert ended.state is CallState.CANCELLED
    assert ended.result is not None and ended.result.result == {"message": "not now"}
    assert [(c.call_id, c.reason) for c in cancels(batch, "laptop")] == [("c1", "not now")]  # not "answered"
    verdict = CallOutcome(status="cancelled", result={"message": "not now"}, device_id="phone")
    assert [c.outcome for c in cancels(batch, "phone")] == [verdict]  # its card shows how the call ended too
    assert rig.records.calls["c1"].state is CallState.CANCELLED


# -------------------------------------------------------------------------------------- ack


def test_ack_moves_the_call_to_acknowledged_then_waiting_user_with_a_save() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")
    assert rig.records.calls["c1"].state is CallState.DELIVERED

    batch = rig.send("phone", ToolAck(call_id="c1", stage="acknowledged"))
    assert "c1" in saved_ids(batch)
    assert rig.records.calls["c1"].state is CallState.ACKNOWLEDGED

    batch = rig.send("phone", ToolAck(call_id="c1", stage="waiting_user"))
    assert "c1" in saved_ids(batch)
    assert rig.records.calls["c1"].state is CallState.WAITING_USER
    assert batch.messages == []


@pytest.mark.parametrize("late", ["phone", "tablet"])
def test_an_ack_behind_the_call_is_ignored_and_never_reaches_the_person(late: str) -> None:
    """A delivery ack that arrives after the call went further (another device's card is open, or
    this device's acks crossed) is old news, not an error shown to the person."""
    rig = Rig()
    rig.connect("phone")
    rig.connect("tablet")
    rig.start("c1")
    rig.send("phone", ToolAck(call_id="c1", stage="waiting_user"))

    batch = rig.send(late, ToolAck(call_id="c1", stage="acknowledged"), envelope_id="back")

    assert errors(batch, "phone") == [] and errors(batch, "tablet") == []
    assert batch.messages == []
    assert "c1" not in saved_ids(batch)
    assert rig.session.live_call("c1") is not None
    assert rig.records.calls["c1"].state is CallState.WAITING_USER


# ------------------------------------------------------------------------------- start_call


def test_start_call_with_no_device_ends_failed_no_app_at_once() -> None:
    rig = Rig()

    call, batch = rig.start("c1")

    assert call.state is CallState.FAILED
    assert call.result is not None and call.result.result == {"message": NO_APP, "error": "no_app"}
    assert batch.ended == [call]
    assert "c1" in saved_ids(batch)
    assert batch.messages == []
    assert rig.session.live_call("c1") is None
    assert rig.session.next_deadline() is None


def test_a_call_too_long_for_a_links_frames_fails_at_once_and_nothing_is_sent() -> None:
    rig = Rig()
    rig.session.open("im", name="wukongim:app-user", device_id="app-user", max_text=400)
    rig.drain()

    call = rig.session.start_call(ToolCall(call_id="big", name="choice", arguments={"question": "x" * 500}), wait=30)
    batch = rig.drain()

    assert call.state is CallState.FAILED and call.result is not None
    message = call.result.result["message"]
    assert call.result.result["error"] == "too_large" and "wukongim:app-user carries (400)" in message
    assert batch.ended == [call] and batch.messages == []
    small = rig.session.start_call(ToolCall(call_id="small", name="choice", arguments={"question": "x"}), wait=30)
    assert small.state is CallState.DELIVERED and kinds(rig.drain(), "im") == ["tool.call"]


def test_known_call_id_is_never_started_twice() -> None:
    rig = Rig()
    rig.connect("phone")
    live, _ = rig.start("c1")

    again = rig.session.start_call(ToolCall(call_id="c1", name="choice"), wait=30.0)
    assert again is live
    assert not rig.drain()

    rig.send("phone", result("c1"))
    ended = rig.session.start_call(ToolCall(call_id="c1", name="choice"), wait=30.0)
    assert (ended.call_id, ended.state) == ("c1", CallState.COMPLETED)
    assert not rig.drain()


def test_call_id_that_ended_earlier_in_the_same_batch_is_not_started_again() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.start("c1")
    rig.session.receive("phone", rig.text_from("phone", result("c1")))  # ends c1; batch not taken yet

    again = rig.session.start_call(ToolCall(call_id="c1", name="choice"), wait=30.0)
    batch = rig.drain()

    assert again.state is CallState.COMPLETED
    assert payloads(batch, "phone", ToolCall) == []


# ---------------------------------------------------------------------------------- recover


def _pending(call_id: str, *, expires_in: float) -> Call:
    request = ToolCall(call_id=call_id, name="choice", expires_at=format_timestamp(START + expires_in))
    call = Call(request=request, conversation_id="default", created_at=START - 100.0)
    call.advance(CallState.DELIVERED, now=START - 99.0)
    return call


def test_recover_ends_pending_calls_cancelled_or_expired_when_overdue_once_only() -> None:
    done = _pending("done", expires_in=60.0)
    done.end("completed", "ok", now=START - 50.0)
    records = FakeRecords(calls=[_pending("fresh", expires_in=60.0), _pending("overdue", expires_in=-5.0), done])
    rig = Rig(records=records)

    closed = rig.session.recover()
    batch = rig.drain()

    assert {call.call_id: call.state for call in closed} == {
        "fresh": CallState.CANCELLED,
        "overdue": CallState.EXPIRED,
    }
    fresh = rig.records.calls["fresh"]
    assert fresh.state is CallState.CANCELLED
    assert fresh.result is not None and fresh.result.result == {"message": RESTARTED}
    assert rig.records.calls["overdue"].state is CallState.EXPIRED
    assert rig.records.calls["done"].state is CallState.COMPLETED
    assert saved_ids(batch) == {"fresh", "overdue"}
    assert rig.session.next_deadline() is None

    assert rig.session.recover() == []
    assert not rig.drain()


def test_recovered_call_card_is_closed_with_the_restart_reason_when_the_app_reconnects() -> None:
    rig = Rig(records=FakeRecords(calls=[_pending("c1", expires_in=60.0)]))
    rig.session.recover()
    rig.drain()

    batch = rig.connect("phone", open_calls=["c1"])

    assert [(c.call_id, c.reason) for c in cancels(batch, "phone")] == [
        ("c1", f"this call already ended (cancelled): {RESTARTED}")
    ]
    assert payloads(batch, "phone", ToolCall) == []


def _forwarded(call_id: str, *, expires_in: float) -> Call:
    call = _pending(call_id, expires_in=expires_in)
    call.forwarded = True
    return call


def test_a_hand_over_keeps_forwarded_calls_live_for_their_claim_and_closes_the_servers_own() -> None:
    own, asked = _pending("own", expires_in=60), _forwarded("asked", expires_in=60)
    records = FakeRecords(calls=[own, asked, _forwarded("late", expires_in=-1)])
    rig = Rig(records=records)

    closed = rig.session.recover(reclaim=15.0)
    rig.drain()

    assert {call.call_id: call.state for call in closed} == {"own": CallState.CANCELLED, "late": CallState.EXPIRED}
    assert rig.session.live_call("asked") is not None and not rig.records.calls["asked"].done
    assert rig.session.next_deadline() == START + 15.0  # the claim's, before the call's own deadline
    batch = rig.connect("phone", open_calls=["asked", "own"])
    assert [call.call_id for call in payloads(batch, "phone", ToolCall)] == ["asked"]  # redelivered
    assert [c.call_id for c in cancels(batch, "phone")] == ["own"]


def test_a_claimed_call_lives_to_its_own_deadline_and_an_unclaimed_one_ends_cancelled_after_the_grace() -> None:
    rig = Rig(records=FakeRecords(calls=[_forwarded("mine", expires_in=60.0), _forwarded("orphan", expires_in=60.0)]))
    rig.session.recover(reclaim=15.0)
    rig.drain()
    rig.connect("phone")

    assert rig.session.claim("mine") and not rig.session.claim("mine")  # once
    rig.clock.advance(15.0)
    assert rig.session.tick() == 1
    batch = rig.drain()

    assert rig.records.calls["orphan"].state is CallState.CANCELLED
    assert [(c.call_id, c.reason) for c in cancels(batch, "phone")] == [("orphan", RESTARTED)]
    assert rig.session.live_call("mine") is not None
    assert rig.session.next_deadline() == START + 60.0
    rig.clock.advance(45.0)
    assert rig.session.tick() == 1 and rig.drain()
    assert rig.records.calls["mine"].state is CallState.EXPIRED


def test_starting_a_recovered_call_again_by_id_claims_it_and_gives_it_back_as_it_stands() -> None:
    rig = Rig(records=FakeRecords(calls=[_forwarded("c1", expires_in=60.0)]))
    rig.session.recover(reclaim=15.0)
    rig.drain()

    again = rig.session.start_call(ToolCall(call_id="c1", name="choice"), wait=600.0)

    assert again.expires_at == START + 60.0 and not rig.drain().changes  # not a new call
    rig.clock.advance(20.0)
    assert rig.session.tick() == 0  # claimed: the grace does not end it


def test_a_released_call_is_neither_ended_nor_told_and_its_deadline_is_gone() -> None:
    rig = Rig()
    rig.connect("phone")
    call, _ = rig.start("c1", wait=30.0)

    assert rig.session.release("c1") is call and rig.session.release("c1") is None
    batch = rig.drain()

    assert not batch and not rig.records.calls["c1"].done  # pending in the records, for the next process
    assert rig.session.live_call("c1") is None and rig.session.next_deadline() is None


# ---------------------------------------------------------------------------- ordering invariant


def _check_commit_before_send(batch: Batch[str], before: dict[str, Call]) -> None:
    """Every ``tool.call`` and every ``tool.cancel`` that ends a live call leaves with its row.

    ``before`` is what the records held before this batch was committed. A call that is new, or
    that was live and is ended by this batch, must be saved by this very batch; a ``tool.call``
    re-sent for a call committed by an earlier batch depends on nothing new.
    """
    saved = {change.call.call_id: change.call for change in batch.changes if isinstance(change, SaveCall)}
    for message in batch.messages:
        if not isinstance(message, Send):
            continue
        payload = codec.decode(message.text).payload
        if isinstance(payload, ToolCall):
            assert payload.call_id in saved or payload.call_id in before, f"tool.call {payload.call_id} not saved"
        elif isinstance(payload, ToolCancel):
            earlier = before.get(payload.call_id)
            if earlier is None or not earlier.done:  # this batch ends it: the terminal row must be in it
                assert payload.call_id in saved, f"terminal tool.cancel {payload.call_id} not saved"
                assert saved[payload.call_id].done


def test_every_tool_call_and_terminal_tool_cancel_is_sent_in_a_batch_that_saves_its_call() -> None:
    rig = Rig()
    seen_kinds: set[str] = set()
    steps: list[Callable[[], object]] = [
        lambda: rig.session.open("phone", name="phone", verify=accept),
        lambda: rig.session.receive("phone", rig.text_from("phone", DeviceHello(device_id="phone"))),
        lambda: rig.session.start_call(ToolCall(call_id="answered", name="choice"), wait=30.0),
        lambda: rig.session.start_call(ToolCall(call_id="expiring", name="choice"), wait=10.0),
        lambda: rig.session.start_call(ToolCall(call_id="by-agent", name="choice"), wait=60.0),
        lambda: rig.session.start_call(ToolCall(call_id="by-app", name="choice"), wait=60.0),
        lambda: rig.session.open("laptop", name="laptop", device_id="laptop"),  # redelivery
        lambda: rig.session.receive("laptop", rig.text_from("laptop", result("answered"))),
        lambda: rig.session.cancel_call("by-agent", "no longer needed"),
        lambda: rig.session.receive("phone", rig.text_from("phone", ToolCancel(call_id="by-app"))),
        lambda: rig.clock.advance(11.0),
        rig.session.tick,
        lambda: rig.session.close("phone"),
        lambda: rig.session.open("phone", name="phone", verify=accept),
        lambda: rig.session.receive(
            "phone", rig.text_from("phone", DeviceHello(device_id="phone", open_calls=["answered", "expiring"]))
        ),
        lambda: rig.session.start_call(ToolCall(call_id="last", name="choice"), wait=60.0),
        lambda: rig.session.cancel_all("shutting down"),
    ]
    for step in steps:
        step()
        before = copy.deepcopy(rig.records.calls)
        batch = rig.drain()
        _check_commit_before_send(batch, before)
        for link in ("phone", "laptop"):
            seen_kinds.update(kinds(batch, link))

    assert {"tool.call", "tool.cancel"} <= seen_kinds  # the scenario exercised what it checks
    assert all(call.done for call in rig.records.calls.values())


# -------------------------------------------------------------------------------- events


def test_text_from_the_app_is_a_text_received_event() -> None:
    rig = Rig()
    rig.connect("phone")

    batch = rig.send("phone", Text(text="what's the weather?"), envelope_id="msg-typed")

    assert batch.events == [TextReceived("phone", "what's the weather?", ref="msg-typed")]
    (told,) = payloads(batch, "phone", History)  # only its history entry, which the App knows by ``ref``
    assert [(e.event, e.text, e.ref, e.device_id) for e in told.entries] == [
        ("text.in", "what's the weather?", "msg-typed", "phone")
    ]


def test_agent_stop_from_the_app_is_a_stop_requested_event() -> None:
    rig = Rig()
    rig.connect("phone")

    batch = rig.send("phone", AgentStop(reason="enough"))

    assert batch.events == [StopRequested("phone", "enough")]


def test_app_tool_list_declares_tools_and_detaching_the_devices_last_link_withdraws_them() -> None:
    rig = Rig()
    rig.vouch("phone-ws", device_id="phone")
    rig.vouch("phone-im", device_id="phone")

    batch = rig.send("phone-ws", ToolList(tools=APP_TOOLS))
    assert ToolsChanged() in batch.events
    assert [tool.name for tool in rig.catalog.declared["app:phone"]] == ["camera"]

    rig.session.close("phone-ws")
    batch = rig.drain()
    assert ToolsChanged() not in batch.events  # the device is still there on its other link
    assert "app:phone" in rig.catalog.declared

    rig.session.close("phone-im")
    batch = rig.drain()
    assert ToolsChanged() in batch.events
    assert DevicesChanged("phone", attached=False) in batch.events
    assert "app:phone" not in rig.catalog.declared


TORCH = ToolDefinition.model_validate(
    {"name": "torch", "type": "action", "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}}}
)


def test_an_app_declared_tool_goes_only_to_its_device_and_a_late_unsupported_elsewhere_does_not_settle_it() -> None:
    rig = Rig()
    rig.connect("torch-phone")
    rig.connect("laptop")  # the reference App: it renders no torch
    rig.send("torch-phone", ToolList(tools=[TORCH]))
    call, batch = rig.start("t1", name="torch")
    assert kinds(batch, "torch-phone") == ["tool.call"] and kinds(batch, "laptop") == []
    rig.clock.now += 1
    batch = rig.send("laptop", ToolResult(call_id="t1", status="unsupported", result={"message": "no renderer"}))
    assert rig.session.live_call("t1") is call and errors(batch, "laptop") == []  # the phone may still answer
    rig.clock.now += 1
    rig.send("torch-phone", ToolResult(call_id="t1", result={"on": True}))
    assert call.state == CallState.COMPLETED and call.result is not None and call.result.result == {"on": True}


def test_unsupported_from_every_attached_device_settles_the_call() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("laptop")
    call, _ = rig.start("c1")
    rig.send("laptop", ToolResult(call_id="c1", status="unsupported", result={"message": "old App"}))
    assert rig.session.live_call("c1") is call
    batch = rig.send("phone", ToolResult(call_id="c1", status="unsupported", result={"message": "old App"}))
    assert call.state == CallState.UNSUPPORTED and [c.reason for c in cancels(batch, "laptop")] == [
        "answered on another device"
    ]


# ------------------------------------------------------------------------------- Web Push


def test_the_welcome_names_the_agents_push_key_and_a_subscription_is_handed_to_the_driver() -> None:
    rig = Rig()
    rig.session.core.push_key = "BPushKey"
    [welcome] = payloads(rig.connect("phone"), "phone", DeviceWelcome)
    assert isinstance(welcome, DeviceWelcome) and welcome.push_key == "BPushKey"

    wanted = {"endpoint": "https://fcm.googleapis.com/fcm/send/x", "keys": {"p256dh": "BP", "auth": "A"}}
    batch = rig.send("phone", PushSubscribe.model_validate({"subscription": wanted}))
    assert batch.events == [PushSubscribed("phone", "phone", {**wanted, "expirationTime": None})]
    assert rig.send("phone", PushSubscribe()).events == [PushSubscribed("phone", "phone", None)]


def test_without_push_the_welcome_names_no_key() -> None:
    rig = Rig()
    [welcome] = payloads(rig.connect("phone"), "phone", DeviceWelcome)
    assert isinstance(welcome, DeviceWelcome) and welcome.push_key is None
