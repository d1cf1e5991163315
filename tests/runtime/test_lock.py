"""One process owns the LineUp server: the OS file lock in the data directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lineup_plugin.runtime.lock import Owner, ServerLock, program


def test_a_second_holder_is_refused_and_sees_the_owner(tmp_path: Path) -> None:
    first, second = ServerLock(tmp_path), ServerLock(tmp_path)
    assert first.acquire("gateway", command="hermes gateway run") and first.held
    assert not second.acquire("cli") and not second.held
    assert second.owner() == Owner(os.getpid(), "gateway", "hermes gateway run")
    assert str(second.owner()) == f"pid {os.getpid()} (gateway), `hermes gateway run`"
    first.release()


def test_released_lock_can_be_taken_again(tmp_path: Path) -> None:
    first, second = ServerLock(tmp_path), ServerLock(tmp_path)
    assert first.acquire("cli")
    first.release()
    assert second.acquire("gateway", command="")
    assert second.owner() == Owner(os.getpid(), "gateway")
    assert str(second.owner()) == f"pid {os.getpid()} (gateway)"
    second.release()
    assert second.owner() is None


def test_a_dead_owner_leaves_no_stale_lock(tmp_path: Path) -> None:
    script = (
        "import pathlib, sys\n"
        "from lineup_plugin.runtime.lock import ServerLock\n"
        "assert ServerLock(pathlib.Path(sys.argv[1])).acquire('gateway')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=60)  # exits holding it
    lock = ServerLock(tmp_path)
    assert lock.acquire("cli")
    lock.release()


def test_acquire_creates_the_data_directory(tmp_path: Path) -> None:
    lock = ServerLock(tmp_path / "new" / "dir")
    assert lock.acquire("process")
    assert lock.path.exists()
    lock.release()


def test_the_owners_program_is_its_command_and_subcommands_never_a_value() -> None:
    assert program(["/usr/local/bin/hermes", "gateway", "run", "--replace"]) == "hermes gateway run"
    assert program(["/opt/venv/bin/hermes", "chat", "-q", "what is my bank PIN?"]) == "hermes chat"
    assert program(["hermes", "what is my bank PIN?"]) == "hermes"
    assert program(["-c"]) == "" and program([]) == ""


def test_by_default_the_lock_file_names_this_program(tmp_path: Path) -> None:
    lock = ServerLock(tmp_path)
    assert lock.acquire("process")
    try:
        owner = lock.owner()
    finally:
        lock.release()
    assert owner == Owner(os.getpid(), "process", program())
