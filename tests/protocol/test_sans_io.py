"""The protocol core does no I/O: importing and running it pulls in no event loop, network library, database or agent
runtime (``socket`` itself comes with pydantic's imports, so it is not on the list)."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = [
    "asyncio",
    "websockets",
    "anyio",
    "httpx",
    "sqlite3",
    "hermes_cli",
    "run_agent",
    "model_tools",
]


def test_protocol_core_and_session_import_no_io_library_in_a_fresh_interpreter() -> None:
    code = (
        "import sys\n"
        "import lineup_plugin.protocol as p\n"
        "from lineup_plugin.protocol import session\n"
        "p.decode(p.encode(p.envelope(p.Text(text='hi'), sender=p.Actor(kind='agent', id='a'),"
        " target=p.Actor(kind='device', id='d'), conversation_id='c')))\n"
        "class Records:\n"
        "    def get_call(self, call_id): return None\n"
        "    def pending_calls(self): return []\n"
        "    def was_seen(self, envelope_id): return False\n"
        "    def history_id(self): return 'h'\n"
        "    def history_head(self): return 0\n"
        "    def history_after(self, after, *, oldest_at, limit): return []\n"
        "    def conversations(self): return []\n"
        "class Catalog:\n"
        "    def agent_tools(self): return []\n"
        "    def runs_in_process(self, name): return False\n"
        "    def declare(self, source, tools): return []\n"
        "    def withdraw(self, source): return False\n"
        "    def check_result(self, name, action, result): return None\n"
        "core = session.Session(records=Records(), catalog=Catalog(), clock=lambda: 0.0)\n"
        "core.open('phone', name='phone', device_id='phone')\n"
        "core.start_call(p.ToolCall(call_id='c1', name='choice'), wait=60)\n"
        "assert core.take().messages\n"
        f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
