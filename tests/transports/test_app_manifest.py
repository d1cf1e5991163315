"""The App's web app manifest and home-screen icons: linked from the page, served with their media
types under the App's policy, and part of the exported App (installing it in Chromium:
``tests/e2e/test_install_browser.py``)."""

from __future__ import annotations

import gzip
import json
import re
import struct
from pathlib import Path
from typing import Any

from lineup_plugin.transports.app_files import packaged_app
from lineup_plugin.transports.wukongim.pair_command import export_app

from .test_direct import http_get, running

GZIP = {"Accept-Encoding": "gzip"}
MANIFEST = "manifest.webmanifest"


def png_size(body: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header chunk (and that it is a PNG at all)."""
    assert body[:8] == b"\x89PNG\r\n\x1a\n" and body[12:16] == b"IHDR", body[:16]
    width, height = struct.unpack(">II", body[16:24])
    return int(width), int(height)


def manifest() -> dict[str, Any]:
    data = json.loads(packaged_app().joinpath(MANIFEST).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_the_manifest_says_what_an_installed_app_needs_with_relative_addresses() -> None:
    data = manifest()
    assert data["name"] and data["short_name"] and len(data["short_name"]) <= 12
    assert data["display"] == "standalone"
    # relative: the App may live at any path of a static host (lineup app export)
    assert data["start_url"] == data["scope"] == data["id"] == "./"
    assert all(re.fullmatch(r"#[0-9a-f]{6}", data[key]) for key in ("theme_color", "background_color"))
    purposes = {(icon["sizes"], icon["purpose"]) for icon in data["icons"] if icon["type"] == "image/png"}
    assert {("192x192", "any"), ("512x512", "any"), ("512x512", "maskable")} <= purposes


async def test_the_page_links_the_manifest_and_every_icon_is_served_as_the_manifest_says(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        _, page_headers, page = await http_get(server.port, "/")
        html = page.decode()
        linked = re.search(r'<link rel="manifest" href="(manifest\.webmanifest\?v=[0-9a-f]{20})">', html)
        assert linked, html[:800]
        touch = re.search(r'<link rel="apple-touch-icon" href="(apple-touch-icon\.png\?v=[0-9a-f]{20})">', html)
        assert touch, html[:800]
        status, headers, body = await http_get(server.port, "/" + linked.group(1), GZIP)
        assert (status, headers["content-type"]) == (200, "application/manifest+json")
        assert headers["cache-control"] == "public, max-age=31536000, immutable"  # its version is in the page
        assert headers["x-content-type-options"] == "nosniff"
        served = json.loads(gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body)
        assert served == manifest()
        for icon in served["icons"]:
            status, headers, picture = await http_get(server.port, "/" + icon["src"])
            assert (status, headers["content-type"]) == (200, icon["type"]), icon
            if icon["type"] == "image/png":
                width, height = png_size(picture)
                assert f"{width}x{height}" == icon["sizes"]
        status, headers, picture = await http_get(server.port, "/" + touch.group(1))
        assert (status, headers["content-type"], png_size(picture)) == (200, "image/png", (180, 180))
    # the page's policy lets the browser fetch the manifest and the icons: both fall under 'self'
    policy = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', html)
    assert policy and "default-src 'self'" in policy.group(1) and "img-src 'self'" in policy.group(1)
    assert "manifest-src" not in policy.group(1)  # so default-src 'self' governs it
    assert "content-security-policy" not in page_headers  # no header policy to contradict the page's


def test_the_exported_app_holds_the_manifest_and_its_icons(tmp_path: Path) -> None:
    export_app(tmp_path / "site")
    site = tmp_path / "site"
    data = json.loads((site / MANIFEST).read_text(encoding="utf-8"))
    for icon in data["icons"]:
        assert (site / icon["src"]).is_file(), icon
    assert png_size((site / "apple-touch-icon.png").read_bytes()) == (180, 180)
    index = (site / "index.html").read_text(encoding="utf-8")
    assert '<link rel="manifest" href="manifest.webmanifest">' in index
