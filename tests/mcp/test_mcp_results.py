"""How LineUp results become MCP results, and how a waiting call reports progress."""

from __future__ import annotations

import json

import pytest

from lineup_plugin.hub import failure
from lineup_plugin.protocol.messages import ToolResult
from lineup_plugin.runtime.base import STATUS_HINTS
from lineup_plugin.runtime.mcp import call_result
from lineup_plugin.runtime.mcp.runtime import Waiting


def test_completed_is_structured_content_and_the_same_json_text() -> None:
    result = ToolResult.model_validate(
        {"call_id": "call_1", "name": "choice", "status": "completed", "result": {"selected": "a", "index": 0}}
    )
    mcp = call_result(result)
    assert not mcp.is_error and mcp.structured_content == {"selected": "a", "index": 0}
    assert json.loads(mcp.content[0].text) == {  # type: ignore[union-attr]
        "status": "completed",
        "tool": "choice",
        "call_id": "call_1",
        "result": {"selected": "a", "index": 0},
    }


@pytest.mark.parametrize("status", ["rejected", "cancelled", "expired", "unsupported", "failed"])
def test_every_other_status_is_an_error_with_its_hint(status: str) -> None:
    mcp = call_result(failure("call_2", "confirm", status, "why"))  # type: ignore[arg-type]
    text = json.loads(mcp.content[0].text)  # type: ignore[union-attr]
    assert mcp.is_error and mcp.structured_content is None
    assert text["status"] == status and text["result"]["message"] == "why" and text["hint"] == STATUS_HINTS[status]


def test_progress_is_reported_at_once_then_throttled_and_never_once_cancelled() -> None:
    reports: list[str] = []
    waiting = Waiting(lambda elapsed, label: reports.append(label))
    waiting.beat("waiting for choice", started=0.0)
    waiting.beat("waiting for choice", started=0.0)  # within PROGRESS_EVERY of the first
    assert reports == ["waiting for choice"]
    waiting.cancelled.set()
    waiting._last = None  # as if the interval had passed
    waiting.beat("waiting for choice", started=0.0)
    assert reports == ["waiting for choice"]
