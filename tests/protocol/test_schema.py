"""The committed JSON Schemas are current and accept what the codec produces."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from lineup_plugin.protocol import KINDS, codec
from lineup_plugin.protocol.messages import TYPE_PREFIX
from lineup_plugin.protocol.schema import SCHEMA_DIR, all_schemas, stale_files, write

from .test_codec import AGENT, DEVICE, SAMPLES


def test_committed_schemas_are_not_stale() -> None:
    assert stale_files() == [], "run: python -m lineup_plugin.protocol.schema"


def test_stale_check_notices_a_changed_file(tmp_path: Path) -> None:
    write(tmp_path)
    assert stale_files(tmp_path) == []
    target = tmp_path / "lineup.v1.tool.call.json"
    target.write_text(target.read_text().replace('"call_id"', '"callId"'))
    (tmp_path / "leftover.json").write_text("{}")
    assert stale_files(tmp_path) == ["leftover.json", "lineup.v1.tool.call.json"]


def test_there_is_a_schema_for_every_kind() -> None:
    names = {p.name for p in SCHEMA_DIR.glob("*.json")}
    assert {f"{TYPE_PREFIX}{kind}.json" for kind in KINDS} <= names


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_encoded_messages_validate_against_their_schema(payload: object) -> None:
    message = codec.envelope(payload, sender=AGENT, target=DEVICE, conversation_id="conv")  # type: ignore[arg-type]
    schema = json.loads((SCHEMA_DIR / f"{message.type}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(json.loads(codec.encode(message)), schema)


def test_schema_rejects_a_message_of_another_kind() -> None:
    message = codec.envelope(SAMPLES[3], sender=AGENT, target=DEVICE, conversation_id="conv")  # a tool.call
    schema = all_schemas()["lineup.v1.tool.result.json"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(codec.encode(message)), schema)
