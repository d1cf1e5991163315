"""The App's connection states (lineup_plugin/app/machine.js): only the moves of the table happen."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MACHINE = ROOT / "lineup_plugin" / "app" / "machine.js"

SCRIPT = """
const { StateMachine } = await import(process.argv[1]);
const seen = [];
const m = new StateMachine("link", { stopped: ["connecting"], connecting: ["ready", "stopped"], ready: ["stopped"] },
  "stopped", (to, from) => seen.push(`${from}>${to}`));
m.go("connecting"); m.go("connecting"); m.go("ready");
let refused = "";
try { m.go("connecting"); } catch (error) { refused = error.message; }
m.go("stopped");
console.log(JSON.stringify({ seen, refused, state: m.state, is: m.is("stopped", "ready") }));
"""


@pytest.mark.node  # CI must run it (tests/ci_strict.py)
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_a_state_machine_moves_only_as_its_table_allows() -> None:
    done = subprocess.run(
        ["node", "--input-type=module", "-e", SCRIPT, MACHINE.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["seen"] == ["stopped>connecting", "connecting>ready", "ready>stopped"]  # staying is no move
    assert result["refused"] == "link: no move from ready to connecting"
    assert result["state"] == "stopped" and result["is"] is True


OUTBOX_SCRIPT = """
globalThis.addEventListener = () => {};
globalThis.WebSocket = class { constructor() { this.readyState = 0; } close() {} send() {} };
const { Connection } = await import(process.argv[1]);
const noop = () => {};
const link = new Connection({ onState: noop, onMessage: noop, onProblem: noop, onUnreachable: noop,
  onAuthFailed: noop, hello: () => ({}) });
const seen = {};
link.connect("192.168.1.20:9527", "token-a"); link.send("answer for A");
link.connect("192.168.1.20:9527", "token-a"); seen.sameAgent = [...link.outbox.queued];
link.connect("192.168.1.30:9527", "token-b"); seen.otherAgent = [...link.outbox.queued];
console.log(JSON.stringify(seen));
"""


@pytest.mark.node  # CI must run it (tests/ci_strict.py)
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_what_waits_for_one_agent_is_never_sent_to_another() -> None:
    done = subprocess.run(
        ["node", "--input-type=module", "-e", OUTBOX_SCRIPT, (MACHINE.parent / "connection.js").as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert seen == {"sameAgent": ["answer for A"], "otherAgent": []}  # a reconnect keeps it; another agent drops it
