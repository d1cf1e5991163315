"""The terminal QR code of the connect link."""

from __future__ import annotations

from pathlib import Path

import segno

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.demo import Demo
from lineup_plugin.qr import terminal_qr

LINK = "http://192.168.1.20:9527/#token=_1gsp2LFSWiH06qnQwCg0uRwzvKBMD0sz8p8llT1-sw"


def test_qr_is_a_square_of_half_blocks_matching_the_encoded_link() -> None:
    lines = terminal_qr(LINK).splitlines()
    size = segno.make(LINK, error="l").symbol_size(border=2)[0]
    assert {len(line) for line in lines} == {size}
    assert len(lines) == (size + 1) // 2
    assert set("".join(lines)) <= {"█", "▀", "▄", " "}


async def test_demo_prints_the_qr_code_under_the_link(tmp_path: Path) -> None:
    lines: list[str] = []
    settings = Settings(host="127.0.0.1", port=0, token="demo-test-token-0123456789", data_dir=tmp_path)
    async with Demo(settings, registry=load_registry(load_entrypoints=False), out=lines.append) as running:
        link = running.server.connect_link
    assert lines[2].strip() == link
    assert lines[3] == terminal_qr(link)
