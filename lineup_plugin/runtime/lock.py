"""Which process owns the LineUp server: an OS file lock in the data directory.

Hermes runs the plugin in every process (CLI, gateway, cron...), but only one of them may open
the port and talk to the App. The first process to take ``<data_dir>/server.lock`` owns the
server until it exits or releases the lock; the OS drops the lock when the process dies, so a
crash never leaves a stale owner. The file holds the owner's pid, role and program (e.g.
``hermes gateway``: the command's leading words, never its arguments), for error messages.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LOCK_FILE = "server.lock"
#: a word of a command line that may be written as the owner's program (a subcommand, not a value)
_PROGRAM_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")


def program(argv: Sequence[str] | None = None) -> str:
    """This process's program as people name it: the command and its subcommands, e.g. ``hermes gateway run``.

    Only the leading words that look like subcommands (up to three words in all, before the first
    option): never a prompt or another value given on the command line.
    """
    argv = sys.argv if argv is None else argv
    if not argv:
        return ""
    words: list[str] = []
    for word in [Path(argv[0]).name, *argv[1:3]]:
        if not _PROGRAM_WORD.fullmatch(word):
            break
        words.append(word)
    return " ".join(words)


@dataclass(frozen=True)
class Owner:
    """The process holding the lock, as written in the lock file."""

    pid: int
    role: str
    program: str = ""

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.role})" + (f", `{self.program}`" if self.program else "")


def _try_lock(file: IO[str]) -> bool:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        try:
            msvcrt.locking(file.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _unlock(file: IO[str]) -> None:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        file.seek(0)
        msvcrt.locking(file.fileno(), msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(file.fileno(), fcntl.LOCK_UN)


class ServerLock:
    """A non-blocking, process-wide lock on ``<data_dir>/server.lock``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._file is not None

    def acquire(self, role: str, *, command: str | None = None) -> bool:
        """Take the lock for this process (``role`` says which kind); False if another process has it.

        ``command`` is the program written for the others' messages (default: :func:`program`).
        """
        if self._file is not None:
            return True
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        file = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open while the lock lives
        if not _try_lock(file):
            file.close()
            return False
        file.seek(0)
        file.truncate()
        file.write(f"{os.getpid()} {role} {program() if command is None else command}".rstrip() + "\n")
        file.flush()
        self._file = file
        return True

    def owner(self) -> Owner | None:
        """Who holds the lock according to the lock file (None if unknown)."""
        try:
            pid, _, rest = self.path.read_text(encoding="utf-8").strip().partition(" ")
            role, _, command = rest.partition(" ")
            return Owner(int(pid), role or "unknown", command)
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        """Give the lock up (nothing happens if this process does not hold it)."""
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.seek(0)
            file.truncate()
            _unlock(file)
        finally:
            file.close()
