"""A QR code of the connect link, drawn with text blocks, so a phone can scan it off a terminal."""

from __future__ import annotations

import io

import segno


def terminal_qr(text: str) -> str:
    """``text`` as a QR code in Unicode half blocks (two modules a character row), quiet zone included."""
    out = io.StringIO()
    segno.make(text, error="l").terminal(out=out, compact=True, border=2)
    return out.getvalue().rstrip("\n")
