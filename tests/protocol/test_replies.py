"""Streamed replies in the session core: pieces numbered under one message id, then one settling ``text``."""

from __future__ import annotations

from lineup_plugin.protocol.messages import Attachment, FileChunk, History, MessageDelta, Text
from lineup_plugin.protocol.replies import ENDED_KEPT, Replies
from lineup_plugin.protocol.session import FileReceived, TextReceived

from .test_session import Rig, kinds, payloads

SHA = "0f" * 32


def deltas(batch: object, link: str) -> list[MessageDelta]:
    return [p for p in payloads(batch, link, MessageDelta) if isinstance(p, MessageDelta)]  # type: ignore[arg-type]


def texts(batch: object, link: str) -> list[Text]:
    return [p for p in payloads(batch, link, Text) if isinstance(p, Text)]  # type: ignore[arg-type]


def test_a_growing_reply_is_sent_as_numbered_pieces_then_settled_once_under_the_same_id() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.connect("tablet")
    rig.session.stream_text("m1", "Hel")
    rig.session.stream_text("m1", "Hello, wor")
    rig.session.stream_text("m1", "Hello, wor")  # an edit that changed nothing sends nothing
    rig.session.send_text("Hello, world.", message_id="m1")
    batch = rig.drain()
    for link in ("phone", "tablet"):
        assert [(d.message_id, d.seq, d.text, d.replace) for d in deltas(batch, link)] == [
            ("m1", 0, "Hel", False),
            ("m1", 1, "lo, wor", False),
        ]
        assert [(t.message_id, t.text, t.interrupted) for t in texts(batch, link)] == [("m1", "Hello, world.", False)]
    assert rig.session.replies.open == []


def test_a_rewritten_start_is_sent_whole_with_replace() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.session.stream_text("m1", "Helo")
    rig.session.stream_text("m1", "Hello")
    batch = rig.drain()
    assert [(d.seq, d.text, d.replace) for d in deltas(batch, "phone")] == [(0, "Helo", False), (1, "Hello", True)]


def test_a_run_that_stops_settles_its_open_reply_as_interrupted_and_ignores_late_edits() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.session.stream_text("m1", "Deploying to sta")
    rig.drain()
    rig.session.set_status("interrupted")
    batch = rig.drain()
    assert kinds(batch, "phone") == ["text", "agent.status"]  # marked before the status says why
    assert [(t.message_id, t.text, t.interrupted) for t in texts(batch, "phone")] == [("m1", "Deploying to sta", True)]
    rig.session.stream_text("m1", "Deploying to staging")  # the runtime's best-effort last edit
    rig.session.send_text("Deploying to staging.", message_id="m1")
    assert kinds(rig.drain(), "phone") == []


def test_an_idle_status_leaves_a_reply_open_for_its_last_piece() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.session.stream_text("m1", "Done")
    rig.session.set_status("idle")
    rig.session.send_text("Done.", message_id="m1")
    batch = rig.drain()
    assert [(t.text, t.interrupted) for t in texts(batch, "phone")] == [("Done.", False)]


def test_every_reply_has_a_message_id_and_inline_file_data_only_goes_to_bounded_links() -> None:
    rig = Rig()
    rig.connect("phone")
    rig.session.open("relay", name="relay", device_id="im-user", max_text=1_000_000)
    rig.drain()
    file = Attachment(id=SHA, name="a.png", mime="image/png", size=3, url="/media/x", data="AAEC")
    message_id = rig.session.send_text("look", attachments=[file])
    batch = rig.drain()
    (direct,) = texts(batch, "phone")
    (relay,) = texts(batch, "relay")
    assert direct.message_id == relay.message_id == message_id
    assert direct.attachments[0].data is None and direct.attachments[0].url == "/media/x"
    assert relay.attachments[0].data == "AAEC"


def test_app_files_reach_the_driver_as_events() -> None:
    rig = Rig()
    rig.connect("phone")
    file = Attachment(id=SHA, name="a.png", mime="image/png", size=3)
    batch = rig.send("phone", Text(text="see", attachments=[file]), envelope_id="msg-see")
    assert batch.events == [TextReceived("phone", "see", (file,), ref="msg-see")]
    # kept in the history only once the driver has found its files (Timeline.keep_text)
    assert payloads(batch, "phone", History) == []
    (typed,) = batch.events
    assert isinstance(typed, TextReceived)
    rig.session.history.keep_text(typed)  # the driver found them: now every device is shown it
    (shown,) = payloads(rig.drain(), "phone", History)
    assert [(e.event, e.ref, e.text) for e in shown.entries] == [("text.in", "msg-see", "see")]
    chunk = FileChunk(upload_id="u1", seq=0, data="AAEC")
    batch = rig.send("phone", chunk)
    assert batch.events == [FileReceived("phone", "phone", chunk)]


def test_ended_replies_are_remembered_within_a_bound() -> None:
    replies = Replies()
    for number in range(ENDED_KEPT + 10):
        replies.update(f"m{number}", "x")
        replies.interrupt()
    assert replies.update("m0", "xy") is not None  # forgotten: a new reply of that id is possible again
    assert replies.update(f"m{ENDED_KEPT + 9}", "xy") is None


def test_a_reply_settled_again_with_the_same_text_sends_nothing_with_new_text_it_is_sent() -> None:
    replies = Replies()
    replies.update("m1", "Hello")
    first = replies.settle("m1", "Hello, world")
    assert first is not None and first.text == "Hello, world"
    assert replies.settle("m1", "Hello, world") is None  # a final edit of the same text: the App has it
    again = replies.settle("m1", "Hello, world!")  # the runtime edited it: every device is told
    assert again is not None and again.text == "Hello, world!"


def test_settled_replies_are_remembered_within_a_bound() -> None:
    replies = Replies()
    for number in range(ENDED_KEPT + 10):
        assert replies.settle(f"m{number}", "same") is not None
    assert replies.settle("m0", "same") is not None  # forgotten: sent again
    assert replies.settle(f"m{ENDED_KEPT + 9}", "same") is None
