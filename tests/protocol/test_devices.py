"""The devices part on its own: links, attach and detach, the agent's envelopes stamped by a fake clock."""

from __future__ import annotations

import json

import pytest

from lineup_plugin.errors import CallStateError
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import format_timestamp
from lineup_plugin.protocol.devices import BAD_HELLO, Devices
from lineup_plugin.protocol.messages import Text
from lineup_plugin.protocol.outputs import Audit, CloseLink, DevicesChanged, Outbox, Send


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[Clock, Outbox[str], Devices[str]]:
    clock = Clock()
    out: Outbox[str] = Outbox(clock)
    return clock, out, Devices(out, agent_id="agent-1", conversation_id="default")


def test_every_envelope_is_stamped_by_the_clock_and_signed_by_the_agent() -> None:
    clock, _, devices = make()
    first = json.loads(devices.encode(Text(text="hi"), "phone"))
    clock.now = 2000.5
    second = codec.decode(devices.encode(Text(text="again"), "phone", conversation_id="c-2", seq=7))
    assert first["timestamp"] == format_timestamp(1000.0) and first["sender"] == {"kind": "agent", "id": "agent-1"}
    assert second.timestamp == format_timestamp(2000.5)
    assert (second.conversation_id, second.seq, second.target.id) == ("c-2", 7, "phone")


def test_attach_and_detach_are_audited_and_told_and_the_last_link_of_a_device_says_so() -> None:
    _, out, devices = make()
    devices.open("ws", name="ws", verify=None, max_text=None)
    devices.open("im", name="im", verify=None, max_text=900)
    devices.attach("ws", "phone")
    devices.attach("im", "phone")
    assert [p.device_id for p in devices.peers] == ["phone", "phone"] and devices.max_text("im") == 900
    assert devices.detach("ws") is None  # the phone is still there on its other link
    assert devices.detach("im") == "phone"
    batch = out.take()
    audits = [(c.event, c.at) for c in batch.changes if isinstance(c, Audit)]
    assert audits == [("device.attach", 1000.0)] * 2 + [("device.detach", 1000.0)] * 2
    assert batch.events == [DevicesChanged("phone", attached=False)] * 2


def test_a_link_opened_twice_is_refused() -> None:
    _, _, devices = make()
    devices.open("ws", name="ws", verify=None, max_text=None)
    with pytest.raises(CallStateError, match="already open"):
        devices.open("ws", name="ws", verify=None, max_text=None)


def test_refuse_sends_the_error_then_closes_and_forgets_the_link() -> None:
    _, out, devices = make()
    devices.open("ws", name="ws", verify=lambda hello: None, max_text=None)
    devices.refuse("ws", "hello_required", "device.hello required", BAD_HELLO)
    batch = out.take()
    assert isinstance(batch.messages[0], Send) and batch.messages[1] == CloseLink(
        "ws", BAD_HELLO, "device.hello required"
    )
    assert devices.state("ws") is None


def test_broadcast_reaches_every_attached_link_and_too_long_names_the_link_over_its_limit() -> None:
    _, out, devices = make()
    for link, limit in (("ws", None), ("im", 400)):
        devices.open(link, name=link, verify=None, max_text=limit)
        devices.attach(link, link)
    devices.open("new", name="new", verify=None, max_text=None)  # not attached yet (no hello): told nothing
    out.take()
    assert devices.broadcast(Text(text="x"), call_id="c1") == 2
    sent = out.take().messages
    assert all(isinstance(s, Send) for s in sent)
    assert sorted((s.link, s.call_id) for s in sent if isinstance(s, Send)) == [("im", "c1"), ("ws", "c1")]
    assert devices.too_long(lambda device: "y" * 401) == ("im", 400, 401)
    assert devices.too_long(lambda device: "y" * 400) is None
