"""A runtime for the service tests: it records what LineUp asks of it."""

from __future__ import annotations

import threading
from typing import Any

from lineup_plugin.runtime.base import AgentRuntime, ToolHandler


class FakeRuntime(AgentRuntime):
    """A runtime that records what the service asks of it; it takes App text only if ``taking``."""

    name = "fake"
    label = "Fake"

    def __init__(self) -> None:
        self.tools: dict[str, ToolHandler] = {}
        self.messages: list[tuple[str, str]] = []
        #: the conversation each of :attr:`messages` came in
        self.conversations: list[str | None] = []
        self.interrupts: list[str | None] = []
        self.refreshed = threading.Event()
        #: set when the service interrupts the run
        self.interrupted = threading.Event()
        self.taking = True

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        self.tools[schema["name"]] = handler

    def unregister_tool(self, name: str) -> None:
        self.tools.pop(name, None)

    def tools_changed(self) -> None:
        self.refreshed.set()

    def is_interrupted(self) -> bool:
        return False

    def heartbeat(self, label: str, started: float) -> None:
        pass

    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        self.messages.append((sender, text))
        self.conversations.append(conversation_id)
        return self.taking

    def interrupt(self, message: str | None = None) -> bool:
        self.interrupts.append(message)
        self.interrupted.set()
        return True

    def steer(self, text: str) -> bool:
        return False


def serve_until_killed(data_dir: str, port: str, token: str) -> None:
    """Serve the App from this process (role ``gateway``, SQLite store in ``data_dir``) until it is killed."""
    from pathlib import Path

    from lineup_plugin import load_registry
    from lineup_plugin.config.settings import Settings
    from lineup_plugin.runtime.service import LineUpService

    settings = Settings(host="127.0.0.1", port=int(port), token=token, data_dir=Path(data_dir))
    service = LineUpService(FakeRuntime(), settings, load_registry(load_entrypoints=False), role="gateway")
    assert service.ensure_started("a test's serving process")
    print("serving", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    import sys

    serve_until_killed(*sys.argv[1:4])
