"""The JSON Schema of every wire message, generated from the models.

The committed copies live in ``lineup_plugin/schemas/`` (one file per kind, plus the tool
definition) so an App written in another language can validate what it sends and receives.
Regenerate them with ``python -m lineup_plugin.protocol.schema``; a test fails when they are stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .messages import KINDS, TYPE_PREFIX, EnvelopeHeader
from .tools import ToolDefinition

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
BASE_ID = "https://lineup.dev/schemas/v1/"


def _model_schema(model: Any) -> dict[str, Any]:
    return dict(model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}"))


def message_schema(kind: str) -> dict[str, Any]:
    """The schema of a whole envelope of ``kind``: the envelope fields with that payload."""
    payload = _model_schema(KINDS[kind])
    envelope = _model_schema(EnvelopeHeader)
    defs: dict[str, Any] = {**envelope.pop("$defs", {}), **payload.pop("$defs", {})}
    defs[KINDS[kind].__name__] = payload
    envelope["properties"]["type"] = {"const": TYPE_PREFIX + kind, "title": "Type", "type": "string"}
    envelope["properties"]["payload"] = {"$ref": f"#/$defs/{KINDS[kind].__name__}"}
    envelope["properties"]["v"] = {"const": 1, "title": "V", "type": "integer"}
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}{TYPE_PREFIX}{kind}.json",
        **{k: v for k, v in envelope.items() if k not in ("title", "description")},
        "description": f"A LineUp v1 {kind} message.",
        "title": TYPE_PREFIX + kind,
        "$defs": dict(sorted(defs.items())),
    }


def all_schemas() -> dict[str, dict[str, Any]]:
    """File name → schema for every message kind and for the tool definition."""
    schemas = {f"{TYPE_PREFIX}{kind}.json": message_schema(kind) for kind in sorted(KINDS)}
    tool = _model_schema(ToolDefinition)
    schemas["tool-definition.json"] = {"$schema": DIALECT, "$id": f"{BASE_ID}tool-definition.json", **tool}
    return schemas


def render(schema: dict[str, Any]) -> str:
    """The committed text form of a schema."""
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def stale_files(directory: Path = SCHEMA_DIR) -> list[str]:
    """The schema files under ``directory`` that are missing, different or not generated."""
    expected = {name: render(schema) for name, schema in all_schemas().items()}
    present = {p.name for p in directory.glob("*.json")} if directory.is_dir() else set()
    stale = [name for name, text in expected.items() if name not in present or (directory / name).read_text() != text]
    return sorted(stale + sorted(present - set(expected)))


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    """(Re)write every schema file under ``directory``; returns the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    expected = all_schemas()
    for old in directory.glob("*.json"):
        if old.name not in expected:
            old.unlink()
    for name, schema in expected.items():
        (directory / name).write_text(render(schema))
    return sorted(expected)


if __name__ == "__main__":  # pragma: no cover - a developer command
    if "--check" in sys.argv:
        stale = stale_files()
        print("stale: " + ", ".join(stale) if stale else "schemas are up to date")
        sys.exit(1 if stale else 0)
    print("\n".join(write()))
