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
