"""The one batch the parts of a session share: its order, and the times it stamps (a fake clock)."""

from __future__ import annotations

from lineup_plugin.protocol.calls import Call
from lineup_plugin.protocol.messages import ToolCall
from lineup_plugin.protocol.outputs import Audit, CloseLink, Outbox, SaveCall, SeenEnvelope, Send, changes_by_kind

NOW = 1000.0


def test_audits_and_seen_ids_are_stamped_by_the_injected_clock() -> None:
    out: Outbox[str] = Outbox(lambda: NOW)
    out.audit("call.created", call_id="c1", detail="choice")
    assert out.first_seen("msg-1", seen_before=False)
    assert out.batch.changes == [Audit("call.created", "c1", None, "choice", NOW), SeenEnvelope("msg-1", NOW)]


def test_an_id_seen_before_or_earlier_in_the_batch_is_not_new_and_the_batch_forgets_it_once_taken() -> None:
    out: Outbox[str] = Outbox(lambda: NOW)
    assert not out.first_seen("old", seen_before=True)
    assert out.first_seen("new", seen_before=False)
    assert not out.first_seen("new", seen_before=False)
    out.take()
    assert out.first_seen("new", seen_before=False)  # the driver has committed it: the store answers now


def test_a_call_that_ended_in_the_batch_is_known_until_the_batch_is_taken() -> None:
    out: Outbox[str] = Outbox(lambda: NOW)
    call = Call(request=ToolCall(call_id="c1", name="choice"), conversation_id="default", created_at=NOW)
    call.end("cancelled", "stop", now=NOW)
    out.ended(call)
    assert out.ended_now("c1") is call
    batch = out.take()
    assert batch.ended == [call] and out.ended_now("c1") is None and not out.batch


def test_messages_keep_their_order_and_changes_group_by_kind_with_the_latest_call_once() -> None:
    out: Outbox[str] = Outbox(lambda: NOW)
    call = Call(request=ToolCall(call_id="c1", name="choice"), conversation_id="default", created_at=NOW)
    out.save(call)
    out.send("phone", "one", "c1")
    out.close("phone", 4400, "bye")
    out.save(call)
    batch = out.take()
    assert batch.messages == [Send("phone", "one", "c1"), CloseLink("phone", 4400, "bye")]
    grouped = changes_by_kind(batch.changes)
    assert list(grouped.calls) == ["c1"] and batch.changes.count(SaveCall(call)) == 1  # written as it stands
    out.save(call)
    assert out.take().changes == [SaveCall(call)]  # and saved again in the next batch
