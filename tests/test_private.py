"""Files only this user can open, written whole or not at all (:func:`lineup_plugin.private.write_private`)."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lineup_plugin.private import write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(directory: Path) -> list[str]:
    """The temporary files a write left in ``directory``."""
    return sorted(path.name for path in directory.iterdir() if path.name.endswith(".tmp"))


@pytest.fixture(params=[0o022, 0o277], ids=["umask-022", "umask-277"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """A usual umask, and one that takes this user's own write right too."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_a_new_file_is_0600_in_a_0700_directory_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "data" / "secret.json"
    write_private(path, b'{"key": 1}')
    assert path.read_bytes() == b'{"key": 1}'
    assert (mode(path), mode(path.parent)) == (0o600, 0o700)
    assert leftovers(path.parent) == []


def test_a_file_readable_by_others_is_replaced_by_a_private_one_in_a_tightened_directory(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    path = directory / "pairing.json"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, b"new")
    assert path.read_bytes() == b"new"
    assert (mode(path), mode(directory)) == (0o600, 0o700)
    assert leftovers(directory) == []


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "subscriptions.json"
    write_private(path, b"old")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_private(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_a_rename_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "in-the-way"
    path.mkdir()  # a directory where the file should go: the rename fails
    with pytest.raises(OSError):
        write_private(path, b"data")
    assert path.is_dir() and list(path.iterdir()) == []
    assert leftovers(tmp_path) == []


def test_create_only_refuses_an_existing_file_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "vapid.pem"
    write_private(path, b"first key", replace=False)
    with pytest.raises(FileExistsError):
        write_private(path, b"second key", replace=False)
    assert path.read_bytes() == b"first key" and mode(path) == 0o600
    assert leftovers(tmp_path) == []


def test_of_many_writers_creating_one_file_exactly_one_wins_and_the_file_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "vapid.pem"
    won: list[bytes] = []
    refused: list[bytes] = []
    start = threading.Barrier(8)

    def create(data: bytes) -> None:
        start.wait()
        try:
            write_private(path, data, replace=False)
            won.append(data)
        except FileExistsError:
            refused.append(data)

    threads = [threading.Thread(target=create, args=(bytes([65 + n]) * 100_000,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(won) == 1 and len(refused) == 7
    assert path.read_bytes() == won[0]
    assert leftovers(tmp_path) == []
