"""Encoding round trips; ids are unique; byte input decodes as json.loads would.

That the one-step encoder writes exactly the text of encode(envelope(...)) is tested in
tests/test_fast_paths.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.messages import Actor, ToolCall

from .test_codec import SAMPLES

ODD = Actor(kind="device", id='dév "1"\n\u2028\x7f')
WIDE = ToolCall(call_id="c2", name="input", arguments={"prompt": "名前\t\\", "fields": {"type": "object"}, "n": None})


@pytest.mark.parametrize("payload", [*SAMPLES, WIDE], ids=lambda p: type(p).__name__)
def test_an_encoded_envelope_decodes_whole(payload: Any) -> None:
    text = codec.encode_envelope(payload, id="m1", sender=Actor(kind="agent", id="a"), target=ODD, conversation_id="c")
    decoded = codec.decode(text)
    assert decoded.payload == payload and decoded.target == ODD and decoded.model_fields_set == set(decoded.__dict__)


def test_new_ids_are_unique_hex() -> None:
    ids = {codec.new_id("call") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == len("call_") + 32 and int(i[5:], 16) >= 0 for i in ids)


def test_bytes_with_a_bom_decode_like_json_loads() -> None:
    text = codec.encode(codec.envelope(SAMPLES[3], sender=ODD, target=ODD, conversation_id="c"))
    assert codec.decode(b"\xef\xbb\xbf" + text.encode()).payload == SAMPLES[3]
    assert codec.decode(text.encode("utf-16")).payload == SAMPLES[3]
    with pytest.raises(codec.ProtocolError, match="BOM"):
        codec.decode("\ufeff" + text)
