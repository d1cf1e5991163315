"""The protocol core does no I/O: importing it pulls in no websockets, anyio or agent runtime."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ["websockets", "anyio", "httpx", "hermes_cli", "run_agent", "model_tools", "sqlite3"]


def test_protocol_core_imports_no_io_library_in_a_fresh_interpreter() -> None:
    code = (
        "import sys\n"
        "import lineup_plugin.protocol as p\n"
        "p.decode(p.encode(p.envelope(p.Text(text='hi'), sender=p.Actor(kind='agent', id='a'),"
        " target=p.Actor(kind='device', id='d'), conversation_id='c')))\n"
        f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
