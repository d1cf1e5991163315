"""A QR code of the connect link, drawn with text blocks, so a phone can scan it off a terminal.

Half blocks draw two modules a character row. A glyph shows in the terminal's foreground colour and
the rest of the cell in its background colour, which are light-on-dark in one terminal and
dark-on-light in the next: drawn in the terminal's own colours, a code readable on a dark terminal is
inverted (its quiet zone dark) on a light one, and many scanners do not read it. So each row sets
both colours itself — black glyphs (the dark modules) on a white background — and resets them at its
end: the code is dark on light in every terminal that shows colours, with the four-module quiet zone
the QR standard asks for.
"""

from __future__ import annotations

import segno

#: the quiet zone around the code, in modules (ISO/IEC 18004 asks for 4)
QUIET_ZONE = 4

#: black foreground on a bright white background (SGR 30 and 107), and the reset (SGR 0)
DARK_ON_LIGHT = "\033[30;107m"
RESET = "\033[0m"

#: (top module dark, bottom module dark) -> the character that draws them in the foreground colour
BLOCKS = {(False, False): " ", (True, False): "\u2580", (False, True): "\u2584", (True, True): "\u2588"}


def terminal_qr(text: str) -> str:
    """``text`` as a QR code in Unicode half blocks, dark on light whatever the terminal's colours."""
    rows = [[bool(module) for module in row] for row in segno.make(text, error="l").matrix_iter(border=QUIET_ZONE)]
    if len(rows) % 2:
        rows.append([False] * len(rows[0]))  # the last half row: quiet zone
    lines = []
    for top, bottom in zip(rows[::2], rows[1::2], strict=True):
        lines.append(DARK_ON_LIGHT + "".join(BLOCKS[pair] for pair in zip(top, bottom, strict=True)) + RESET)
    return "\n".join(lines)
