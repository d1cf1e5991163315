"""The parts of the documentation site that are generated from the code: settings and wire messages.

``docs/settings.md`` and ``docs/protocol.md`` are written by hand, except between the lines
``<!-- generated: NAME ... -->`` and ``<!-- end of generated: NAME -->``, which this module fills:

- ``settings``: every setting of :class:`~lineup_plugin.config.settings.Settings`, from the
  model's JSON Schema (type, bounds, description), with its ``LINEUP_*`` variable and its default;
- ``messages``: every wire message, from the committed JSON Schemas in ``lineup_plugin/schemas/``
  (which a test keeps equal to the models): the envelope, each kind's payload fields, and the
  definitions they share.

Run ``python -m lineup_plugin.docs_gen`` from a source checkout to refresh the pages (``--check``
only says which are stale, exit status 1); a test fails when a committed page is stale.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the site's pages, in a source checkout (not in an installed wheel)
DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
TYPE_PREFIX = "lineup.v1."

#: the envelope fields whose schema differs per kind, as the envelope table shows them
ENVELOPE_OVERRIDES: dict[str, Any] = {
    "type": {"type": "string", "format": "lineup.v1.<kind>"},
    "payload": {"type": "object", "format": "the kind's payload, below"},
}

BEGIN = "<!-- generated: {name} (python -m lineup_plugin.docs_gen); edit the code, not this part -->"
END = "<!-- end of generated: {name} -->"


def _text(description: str | None) -> str:
    """A docstring or schema description as one Markdown paragraph per paragraph (RST ``code`` made Markdown)."""
    if not description:
        return ""
    paragraphs = [" ".join(part.split()) for part in re.split(r"\n\s*\n", description.strip())]
    text = "\n\n".join(paragraphs).replace("``", "`")
    text = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?([^`.]+)`", r"`\1`", text)  # Sphinx roles: :data:`X`, :class:`~a.B`
    return _escaped(text)


def _escaped(text: str) -> str:
    """``<`` and ``>`` outside code spans as entities, so ``<data_dir>`` is not read as an HTML tag."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    """``text`` made safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(name: str) -> str:
    return "def-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _code(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def type_of(schema: dict[str, Any]) -> str:
    """A short, readable type for a JSON Schema: ``string (1–200 chars)``, ``integer ≥ 0``, links to definitions."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "const" in schema:
        return _code(schema["const"])
    if "enum" in schema:
        return " or ".join(_code(value) for value in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(type_of(option) for option in schema["anyOf"])
    kind = schema.get("type")
    bounds = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in schema:
            bounds.append(f"{sign} {schema[key]:,}" if isinstance(schema[key], int) else f"{sign} {schema[key]}")
    if kind == "string":
        length = (schema.get("minLength"), schema.get("maxLength"))
        extra = [schema["format"]] if "format" in schema else []
        if length != (None, None):
            low, high = length
            extra.append(f"{low or 0}–{high:,} chars" if high is not None else f"at least {low} chars")
        if "pattern" in schema:
            extra.append(f"matching `{schema['pattern']}`")
        return "string" + (f" ({_escaped(', '.join(extra))})" if extra else "")
    if kind == "object" and "format" in schema:
        return f"object ({_escaped(schema['format'])})"
    if kind in ("integer", "number"):
        return f"{kind} {' and '.join(bounds)}".strip()
    if kind == "array":
        items = type_of(schema.get("items", {})) if schema.get("items") else "any"
        count = f", at most {schema['maxItems']:,}" if "maxItems" in schema else ""
        return f"array of {items}{count}"
    if kind == "object":
        values = schema.get("additionalProperties")
        return f"object of {type_of(values)}" if isinstance(values, dict) and values else "object"
    if isinstance(kind, str):
        return kind
    return "any"


def _fields_table(schema: dict[str, Any]) -> str:
    """The properties of an object schema as a Markdown table."""
    required = set(schema.get("required", []))
    rows = ["| field | type | required | default |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        default = _code(prop["default"]) if "default" in prop and name not in required else ""
        rows.append(f"| `{name}` | {_cell(type_of(prop))} | {'yes' if name in required else 'no'} | {default} |")
    return "\n".join(rows)


def messages_reference(schema_dir: Path = SCHEMA_DIR) -> str:
    """The Markdown of the wire messages, from the committed JSON Schemas under ``schema_dir``."""
    schemas = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(schema_dir.glob("*.json"))}
    messages = {name: schema for name, schema in schemas.items() if name.startswith(TYPE_PREFIX)}
    payloads: set[str] = set()
    shared: dict[str, dict[str, Any]] = {}
    for schema in schemas.values():
        for name, definition in schema.get("$defs", {}).items():
            shared.setdefault(name, definition)
    for name, schema in schemas.items():
        if not name.startswith(TYPE_PREFIX):  # the tool definition, a document of its own
            body = {key: value for key, value in schema.items() if key not in ("$schema", "$id", "$defs")}
            shared.setdefault(str(schema.get("title", name)), body)
    out = ["## The envelope", ""]
    first = next(iter(messages.values()))
    out += [
        "Every message is one JSON object with these fields; `payload` is the kind's own object (below).",
        "",
        _fields_table({**first, "properties": {**first["properties"], **ENVELOPE_OVERRIDES}}),
        "",
        "## Messages",
        "",
    ]
    for file_name, schema in messages.items():
        kind = file_name.removeprefix(TYPE_PREFIX).removesuffix(".json")
        payload_name = str(schema["properties"]["payload"]["$ref"]).rsplit("/", 1)[-1]
        payloads.add(payload_name)
        payload = schema["$defs"][payload_name]
        out += [
            f"### {kind} {{#{_anchor(payload_name)}}}",  # where a link to the payload's definition lands
            "",
            f'`"type": "{TYPE_PREFIX}{kind}"`, payload `{payload_name}`; schema `lineup_plugin/schemas/{file_name}`.',
            "",
            _text(payload.get("description")),
            "",
            _fields_table(payload),
            "",
        ]
    out += ["## Definitions", "", "The other objects the messages above hold, each once.", ""]
    for name in sorted(set(shared) - payloads):
        definition = shared[name]
        out += [f"### {name} {{#{_anchor(name)}}}", ""]
        if definition.get("description"):
            out += [_text(definition["description"]), ""]
        if definition.get("properties"):
            out += [_fields_table(definition), ""]
        else:
            out += [f"Type: {_cell(type_of(definition))}.", ""]
    return "\n".join(line for line in out).strip() + "\n"


#: defaults that depend on the machine, said in words
_DEFAULT_WORDS = {"data_dir": "`$HERMES_HOME/lineup` (`~/.hermes/lineup` without `HERMES_HOME`)"}


def settings_reference() -> str:
    """The Markdown of every setting, from the JSON Schema of the settings model."""
    from .config import settings as module
    from .config.check import ENV_PREFIX

    Settings = module.Settings

    schema = Settings.model_json_schema()
    nested = schema.get("$defs", {})

    def table(properties: dict[str, Any], required: set[str], prefix: str, model: Any) -> list[str]:
        rows = ["| setting | environment | type | default | what it does |", "|---|---|---|---|---|"]
        for name, prop in properties.items():
            shown = {key: value for key, value in prop.items() if key != "description"}
            if name in required:
                default = "required"
            elif name in _DEFAULT_WORDS:
                default = _DEFAULT_WORDS[name]
            elif "default" in prop:
                default = _code(prop["default"])
            else:
                default = _code(model.model_fields[name].get_default(call_default_factory=True))
            rows.append(
                f"| `{prefix}{name}` | `{ENV_PREFIX}{(prefix + name).replace('.', '_').upper()}` | "
                f"{_cell(type_of(shown))} | {_cell(default)} | {_cell(_text(prop.get('description')))} |"
            )
        return rows

    out = table(schema["properties"], set(schema.get("required", [])), "", Settings)
    for name, prop in schema["properties"].items():
        for option in prop.get("anyOf", []):
            ref = option.get("$ref")
            if ref is None:
                continue
            model_name = str(ref).rsplit("/", 1)[-1]
            definition = nested[model_name]
            inner = getattr(module, model_name)
            out += [
                "",
                f"### {name} {{#{_anchor(model_name)}}}",
                "",
                _text(definition.get("description")),
                "",
                *table(definition["properties"], set(definition.get("required", [])), f"{name}.", inner),
            ]
    return "\n".join(out).strip() + "\n"


#: the generated regions: name → (page under docs/, what fills it)
SECTIONS: dict[str, tuple[str, Callable[[], str]]] = {
    "settings": ("settings.md", settings_reference),
    "messages": ("protocol.md", messages_reference),
}


def filled(text: str, name: str, body: str) -> str | None:
    """``text`` with the region ``name`` holding ``body``; None if the page has no such region."""
    begin, end = BEGIN.format(name=name), END.format(name=name)
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        return None
    return text[: start + len(begin)] + "\n\n" + body + "\n" + text[stop:]


def _regenerated(docs: Path) -> list[tuple[Path, str, str | None]]:
    """Each page under ``docs`` with a generated region: its path, its text, and its text regenerated
    (None when the page lacks the region's marker lines)."""
    pages = []
    for name, (page, make) in SECTIONS.items():
        path = docs / page
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        pages.append((path, text, filled(text, name, make())))
    return pages


def _missing(path: Path) -> str:
    name = next(name for name, (page, _) in SECTIONS.items() if page == path.name)
    return f"{path.name}: no generated region; add the lines {BEGIN.format(name=name)} and {END.format(name=name)}"


def stale_pages(docs: Path = DOCS_DIR) -> list[str]:
    """The pages under ``docs`` whose generated region is out of date, or missing (saying so)."""
    return [_missing(path) if new is None else path.name for path, text, new in _regenerated(docs) if new != text]


def write(docs: Path = DOCS_DIR) -> list[str]:
    """Refresh every generated region under ``docs``; returns the pages that lack their region (left alone)."""
    missing = []
    for path, text, new in _regenerated(docs):
        if new is None:
            missing.append(_missing(path))
        elif new != text:
            path.write_text(new, encoding="utf-8")
    return missing


def main(argv: list[str]) -> int:
    """``python -m lineup_plugin.docs_gen [--check]``."""
    problems = stale_pages() if "--check" in argv else write()
    for problem in problems:
        print(f"lineup docs: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover - a developer command
    sys.exit(main(sys.argv[1:]))
