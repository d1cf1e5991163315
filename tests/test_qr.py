"""The terminal QR code of the connect link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import segno

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.demo import Demo
from lineup_plugin.qr import terminal_qr

LINK = "http://192.168.1.20:9527/#token=_1gsp2LFSWiH06qnQwCg0uRwzvKBMD0sz8p8llT1-sw"


#: the 16 ANSI colours as luminance (0 black .. 1 white): 30-37/40-47 normal, 90-97/100-107 bright
ANSI_LUMINANCE = [0.0, 0.3, 0.4, 0.5, 0.2, 0.35, 0.45, 0.75, 0.5, 0.6, 0.7, 0.85, 0.55, 0.7, 0.8, 1.0]

#: terminal themes as (default foreground, default background) luminance
LIGHT_TERMINAL = (0.0, 1.0)
DARK_TERMINAL = (0.9, 0.1)


def render(text: str, theme: tuple[float, float]) -> list[list[float]]:
    """What a terminal with ``theme`` shows of ``text``: one pixel per module (two a character row).

    Reads the SGR colour codes (foreground 30-37/90-97, background 40-47/100-107, 39/49 default,
    7 inverse, 0 reset); a half block paints its half in the foreground colour, the rest is background.
    A margin of the terminal's background surrounds the picture (the screen around the text).
    """
    halves = {" ": (False, False), "\u2580": (True, False), "\u2584": (False, True), "\u2588": (True, True)}
    rows: list[list[float]] = []
    for line in text.splitlines():
        fg, bg, inverse = theme[0], theme[1], False
        top: list[float] = []
        bottom: list[float] = []
        for token in re.split(r"(\x1b\[[0-9;]*m)", line):
            if token.startswith("\x1b["):
                for code in [int(c) if c else 0 for c in token[2:-1].split(";")]:
                    if code == 0:
                        fg, bg, inverse = theme[0], theme[1], False
                    elif code == 7:
                        inverse = True
                    elif 30 <= code <= 37 or 90 <= code <= 97:
                        fg = ANSI_LUMINANCE[code % 10 + (8 if code >= 90 else 0)]
                    elif 40 <= code <= 47 or 100 <= code <= 107:
                        bg = ANSI_LUMINANCE[code % 10 + (8 if code >= 100 else 0)]
                    elif code == 39:
                        fg = theme[0]
                    elif code == 49:
                        bg = theme[1]
                continue
            for char in token:
                front, back = (bg, fg) if inverse else (fg, bg)
                upper, lower = halves[char]
                top.append(front if upper else back)
                bottom.append(front if lower else back)
        rows += [top, bottom]
    width = max(len(row) for row in rows) + 2
    screen = [[theme[1]] * width]
    return screen + [[theme[1], *row, *[theme[1]] * (width - 1 - len(row))] for row in rows] + screen


def box(marked: list[list[bool]]) -> tuple[int, int, int, int]:
    """The bounding box (top, left, bottom, right) of the marked pixels."""
    ys = [y for y, row in enumerate(marked) if any(row)]
    xs = [x for row in marked for x, pixel in enumerate(row) if pixel]
    return min(ys), min(xs), max(ys), max(xs)


def scan(picture: list[list[float]]) -> tuple[list[list[bool]], int]:
    """What a scanner reads: the dark modules on the light "paper", and the light margin around them.

    The paper is the bounding box of the light pixels; the symbol the bounding box of the dark pixels
    on it; the margin the narrowest light band between them (-1 when anything dark lies in it).
    """
    dark = [[pixel < 0.5 for pixel in row] for row in picture]
    p_top, p_left, p_bottom, p_right = box([[not pixel for pixel in row] for row in dark])
    paper = [row[p_left : p_right + 1] for row in dark[p_top : p_bottom + 1]]
    top, left, bottom, right = box(paper)
    symbol = [row[left : right + 1] for row in paper[top : bottom + 1]]
    margin = min(top, left, len(paper) - 1 - bottom, len(paper[0]) - 1 - right)
    return symbol, margin


@pytest.mark.parametrize("theme", [LIGHT_TERMINAL, DARK_TERMINAL], ids=["light-terminal", "dark-terminal"])
def test_qr_reads_dark_on_light_with_a_four_module_quiet_zone_on_light_and_dark_terminals(
    theme: tuple[float, float],
) -> None:
    symbol, margin = scan(render(terminal_qr(LINK), theme))
    expected = [[bool(module) for module in row] for row in segno.make(LINK, error="l").matrix_iter(border=0)]
    assert symbol == expected  # dark modules dark, light ones light: not inverted
    assert margin >= 4


def test_qr_lines_are_as_wide_as_the_code_with_its_quiet_zone_and_reset_their_colours() -> None:
    lines = terminal_qr(LINK).splitlines()
    size = segno.make(LINK, error="l").symbol_size(border=4)[0]
    assert len(lines) == (size + 1) // 2
    for line in lines:
        assert line.endswith("\x1b[0m")
        assert len(re.sub(r"\x1b\[[0-9;]*m", "", line)) == size


async def test_demo_prints_the_qr_code_under_the_link(tmp_path: Path) -> None:
    lines: list[str] = []
    settings = Settings(host="127.0.0.1", port=0, token="demo-test-token-0123456789", data_dir=tmp_path)
    async with Demo(settings, registry=load_registry(load_entrypoints=False), out=lines.append) as running:
        link = running.server.connect_link
    assert lines[2].strip() == link
    assert lines[3] == terminal_qr(link)
