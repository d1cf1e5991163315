"""Fuzzing the decoder: whatever arrives, ``decode`` returns an Envelope or raises ProtocolError, nothing else.

Inputs range from arbitrary text and bytes to near-valid envelopes: a valid message of every kind
with one field dropped, retyped or replaced, keys added, or the version and type bent. That the fast
decoder agrees with the step-by-step one is tested in tests/test_fast_paths.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lineup_plugin.errors import ProtocolError
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.messages import KINDS, Envelope

from .test_codec import AGENT, DEVICE, SAMPLES

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: one valid wire object of every kind
VALID: list[dict[str, Any]] = [
    json.loads(codec.encode(codec.envelope(sample, sender=DEVICE, target=AGENT, conversation_id="conv")))
    for sample in SAMPLES
]

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def decodes_cleanly(data: str | bytes) -> Envelope | None:
    """Decode ``data``; an Envelope or None for a ProtocolError. Anything else fails the test."""
    try:
        message = codec.decode(data)
    except ProtocolError as exc:
        assert str(exc), "a protocol error always says what is wrong"
        return None
    assert isinstance(message, Envelope)
    assert message.kind in KINDS
    again = codec.decode(codec.encode(message))  # what was accepted can be sent on
    assert again.payload == message.payload
    return message


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON object (dict keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def parent_of(message: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = message
    for step in path[:-1]:
        node = node[step]
    return node


@st.composite
def near_valid(draw: st.DrawFn) -> dict[str, Any]:
    """A valid envelope of some kind with a few fields dropped, replaced or added."""
    message = copy.deepcopy(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        where = paths(message)
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = parent_of(message, path)
        action = draw(st.sampled_from(["drop", "replace", "add"]))
        if action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values)
        else:
            parent[path[-1]] = draw(json_values)
    return message


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text(text: str) -> None:
    decodes_cleanly(text)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data: bytes) -> None:
    decodes_cleanly(data)


@FUZZ
@given(json_values)
def test_arbitrary_json(value: Any) -> None:
    decodes_cleanly(json.dumps(value))


@FUZZ
@given(near_valid())
def test_near_valid_envelopes(message: dict[str, Any]) -> None:
    decodes_cleanly(json.dumps(message, ensure_ascii=False))


@FUZZ
@given(near_valid())
def test_near_valid_envelopes_as_utf8_bytes(message: dict[str, Any]) -> None:
    decodes_cleanly(json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass"))


@FUZZ
@given(
    st.sampled_from(VALID),
    st.one_of(st.integers(), st.text(max_size=5), st.none(), st.floats(allow_nan=False), st.booleans()),
    st.text(max_size=30),
)
def test_bent_version_and_type(valid: dict[str, Any], version: Any, kind: str) -> None:
    bent = {**valid, "v": version, "type": f"lineup.v1.{kind}"}
    message = decodes_cleanly(json.dumps(bent))
    if message is not None:
        assert version == 1 and type(version) is int and kind in KINDS


@FUZZ
@given(st.sampled_from(VALID), st.integers(min_value=1, max_value=3000))
def test_truncated_envelopes(valid: dict[str, Any], cut: int) -> None:
    text = json.dumps(valid, ensure_ascii=False)
    decodes_cleanly(text[: min(cut, len(text) - 1)])


def test_every_kind_is_fuzzed() -> None:
    assert {message["type"].removeprefix("lineup.v1.") for message in VALID} == set(KINDS)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_not_silently_nulled(constant: str) -> None:
    # found by the fuzzer: Python's json read them, and re-encoding turned them into null
    text = json.dumps(VALID[3]).replace('"q"', constant)
    assert constant in text
    with pytest.raises(ProtocolError, match=f"malformed JSON \\({constant} is not valid JSON\\)"):
        codec.decode(text)
