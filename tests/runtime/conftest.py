"""Fixtures shared by the runtime tests."""

from __future__ import annotations

import pytest

from lineup_plugin.runtime import service


@pytest.fixture
def impatient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that cannot reach the process serving the App gives up after 0.1 s, not 10 s (``FORWARD_PATIENCE``)."""
    monkeypatch.setattr(service, "FORWARD_PATIENCE", 0.1)
