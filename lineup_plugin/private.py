"""Directories and files only this user can open: 0700 and 0600, whatever already exists and whatever the umask.

:func:`write_private` writes such a file whole or not at all (the pairing file, the push key and
subscriptions, the forwarding token, the kept tool schemas).

What LineUp keeps (files the App sent, the pairing file, the data directory around them) may be
private; a data directory another program or an older version made ``0755``, or a umask of
``022``, must not leave it readable by the machine's other users.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

#: a directory of this user's only
DIR_MODE = 0o700
#: a file of this user's only
FILE_MODE = 0o600


def private_dir(path: Path, *, root: Path | None = None) -> None:
    """Make ``path`` a directory only this user can open, with every directory from ``root`` down to it.

    ``root`` (default: ``path`` itself) must be ``path`` or one of its parents. Each directory
    from ``root`` to ``path`` is created 0700 if missing, and tightened to 0700 if it exists with
    rights for others (but a shared directory — sticky like ``/tmp``, the root, the home directory —
    is left as it is); parents above ``root`` are created if missing but otherwise left alone.
    Raises OSError when a directory cannot be made or changed (another user's, a read-only disk).
    """
    root = path if root is None else root
    levels = [path, *path.parents]
    if root not in levels:
        raise ValueError(f"{root} is not {path} or one of its parents")
    root.parent.mkdir(parents=True, exist_ok=True)
    for level in reversed(levels[: levels.index(root) + 1]):
        with contextlib.suppress(FileExistsError):
            level.mkdir(mode=DIR_MODE)
        mode = level.stat().st_mode
        if stat.S_IMODE(mode) != DIR_MODE and not _shared(level, mode):
            level.chmod(DIR_MODE)


def _shared(path: Path, mode: int) -> bool:
    """Whether ``path`` is a directory others must keep using (``/tmp`` and the like, the file system's
    root, the home directory) that a data directory set there must not close: LineUp's own
    directories below it are private anyway."""
    return bool(mode & stat.S_ISVTX) or path == Path(path.anchor) or path == Path.home()


def private_file(path: Path, *, append: bool = False) -> int:
    """Open ``path`` for writing (truncated, or for ``append``), created 0600 and made 0600 if it was not.

    Returns the file descriptor (wrap it with :func:`os.fdopen`).
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes, *, replace: bool = True) -> None:
    """Write ``data`` as file ``path``, only this user's (0600), whole or not at all.

    The bytes go to a new temporary file (0600, created exclusively) in ``path``'s directory, made
    private (0700) first as :func:`private_dir` does, and are synced to disk; then the file takes
    ``path``'s name: in place of what is there (``replace``), or only if there is nothing there
    (``replace=False``: ``FileExistsError`` otherwise, and whatever another process wrote first is
    kept). A failure leaves ``path`` as it was and no temporary file behind; it raises OSError.
    """
    private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:  # a umask that takes this user's rights too
                os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(temporary, path)
        else:
            os.link(temporary, path)  # never over a file another process made meanwhile
        _sync_dir(path.parent)
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()  # a failure's, or the link's other name; gone already after a replace


def _sync_dir(path: Path) -> None:
    """Make a file's new name in directory ``path`` last a power cut (best effort: not every OS can)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
