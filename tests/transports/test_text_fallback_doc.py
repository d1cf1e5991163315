"""The conversation docs/text-fallback.png shows is real: run it, check every answer and the page."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "text_fallback.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("text_fallback", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_pictured_conversation_completes_every_call_in_text() -> None:
    script = load_script()
    lines, results = await script.conversation()
    assert [(r.name, r.status, r.result) for r in results] == [
        ("choice", "completed", {"selected": "production", "index": 2}),
        ("confirm", "completed", {"approved": True}),
        ("input", "completed", {"values": {"title": "Faster checkout on phones", "notify": True}}),
    ]
    assert lines[0] == ("user", "Ship build 1.4.2, please.")
    assert ("agent", '"prod" is not one of the options. Reply with a number from 1 to 3, or "cancel".') in lines
    assert lines[-1] == ("agent", "Done: 1.4.2 is live on production and the team was told.")


def test_the_chat_page_escapes_what_was_said() -> None:
    page = load_script().render([("user", "<script>alert(1)</script>"), ("agent", "a & b")], agent="<b>")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<div class="msg agent">a &amp; b</div>' in page and "<header>&lt;b&gt;" in page
