"""How the direct server sends the App's files: one script, gzip, ETag/304, versioned URLs cached for good.

Bytes and headers only (the time it saves on a phone network is measured by ``benchmarks/phone.py``).
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lineup_plugin.transports.app_files import packaged_app
from lineup_plugin.transports.direct.static import BUNDLE_PATH, AppFiles, accepts_gzip, etag_of
from lineup_plugin.transports.wukongim.pair_command import export_app

from .test_direct import http_get, running

GZIP = {"Accept-Encoding": "gzip, deflate"}


def versions(index: bytes) -> dict[str, str]:
    """The files index.html names with ``?v=``, and their versions."""
    return dict(re.findall(r'(?:src|href)="([^"?]+)\?v=([0-9a-f]{20})"', index.decode()))


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A small App of three modules, a style sheet and an icon."""
    root = tmp_path / "app"
    (root / "cards").mkdir(parents=True)
    (root / "index.html").write_text(
        '<!doctype html><link rel="icon" href="icon.svg"><link rel="stylesheet" href="style.css">'
        '<script type="module" src="app.js"></script><a href="https://example.org/">x</a>'
    )
    (root / "app.js").write_text(
        'import { card } from "./cards/card.js";\n'
        'import { h } from "./dom.js";\n'
        "document.body.append(h(card()));\n"
        'export function relay() {\n  return import("./vendor/relay.js");\n}\n'
    )
    (root / "dom.js").write_text("export function h(text) {\n  return document.createTextNode(text);\n}\n")
    (root / "cards" / "card.js").write_text("export const card = () => " + '"a card ".repeat(200)' + ";\n")
    (root / "style.css").write_text("body { margin: 0 }\n" * 100)
    (root / "icon.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    return root


async def test_index_names_its_files_by_version_and_its_entry_as_the_bundle(tmp_path: Path, app_dir: Path) -> None:
    async with running(tmp_path, app_dir=app_dir) as server:
        _, _, index = await http_get(server.port, "/")
        named = versions(index)
        assert set(named) == {"icon.svg", "style.css", BUNDLE_PATH.lstrip("/")}
        assert named["style.css"] == etag_of((app_dir / "style.css").read_bytes())
        assert 'href="https://example.org/"' in index.decode()  # only the App's own files
        status, headers, script = await http_get(server.port, f"{BUNDLE_PATH}?v={named['app.bundle.js']}")
    assert (status, headers["content-type"]) == (200, "text/javascript; charset=utf-8")
    assert etag_of(script) == named["app.bundle.js"]
    text = script.decode()
    # every module in one script, dependencies first; the dynamic import stays for the browser
    assert text.index('"cards/card.js"') < text.index('"dom.js"') < text.index('__lineup["app.js"]')
    assert 'import("./vendor/relay.js")' in text
    assert not re.search(r"^import ", text, re.M)


async def test_a_file_asked_for_by_its_version_is_cached_for_good_anything_else_revalidated(
    tmp_path: Path, app_dir: Path
) -> None:
    async with running(tmp_path, app_dir=app_dir) as server:
        _, _, index = await http_get(server.port, "/")
        version = versions(index)["style.css"]
        _, current, _ = await http_get(server.port, f"/style.css?v={version}")
        _, stale, _ = await http_get(server.port, "/style.css?v=00000000000000000000")
        _, plain, _ = await http_get(server.port, "/style.css")
        _, page, _ = await http_get(server.port, "/")
    assert current["cache-control"] == "public, max-age=31536000, immutable"
    assert stale["cache-control"] == plain["cache-control"] == page["cache-control"] == "no-cache"
    assert current["etag"] == plain["etag"] == f'W/"{version}"'


async def test_revalidating_an_unchanged_file_gets_304_without_a_body_a_changed_one_200(
    tmp_path: Path, app_dir: Path
) -> None:
    async with running(tmp_path, app_dir=app_dir) as server:
        _, first, body = await http_get(server.port, "/", GZIP)
        again = {"If-None-Match": first["etag"], **GZIP}
        status, headers, empty = await http_get(server.port, "/", again)
        assert (status, empty, headers["etag"]) == (304, b"", first["etag"])
        assert "content-length" not in headers and "content-encoding" not in headers
        assert headers["x-content-type-options"] == "nosniff"
        listed = await http_get(server.port, "/", {"If-None-Match": f'"other", {first["etag"]}'})
        assert listed[0] == 304
        (app_dir / "style.css").write_text("body { margin: 1px }\n")  # the page names a new version
        status, changed, body_now = await http_get(server.port, "/", again)
    assert status == 200 and changed["etag"] != first["etag"] and body_now != body


@pytest.mark.parametrize("path", ["/style.css", BUNDLE_PATH, "/"])
async def test_text_goes_gzip_compressed_to_a_client_that_accepts_it(tmp_path: Path, app_dir: Path, path: str) -> None:
    async with running(tmp_path, app_dir=app_dir) as server:
        _, plain_headers, plain = await http_get(server.port, path)
        status, headers, packed = await http_get(server.port, path, GZIP)
        _, refused_headers, refused = await http_get(server.port, path, {"Accept-Encoding": "gzip;q=0, br"})
    assert "content-encoding" not in plain_headers and "content-encoding" not in refused_headers
    assert refused == plain
    if len(plain) < 512:  # too small to gain anything
        assert "content-encoding" not in headers and packed == plain
        return
    assert (status, headers["content-encoding"], headers["vary"]) == (200, "gzip", "Accept-Encoding")
    assert int(headers["content-length"]) == len(packed) < len(plain)
    assert gzip.decompress(packed) == plain
    assert headers["etag"] == plain_headers["etag"]  # one version, two encodings (weak ETag)


async def test_pictures_and_small_files_are_sent_as_they_are(tmp_path: Path, app_dir: Path) -> None:
    (app_dir / "photo.png").write_bytes(b"\x89PNG" + bytes(4000))
    async with running(tmp_path, app_dir=app_dir) as server:
        _, png, _ = await http_get(server.port, "/photo.png", GZIP)
        _, icon, _ = await http_get(server.port, "/icon.svg", GZIP)
    assert "content-encoding" not in png and "content-encoding" not in icon


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("GZIP", True),
        ("*", True),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("gzip;q=nonsense", False),
        ("br, zstd", False),
        ("", False),
        ("gzipx", False),
        ("\udcff" * 3, False),
    ],
)
def test_accept_encoding_is_read_by_the_rules(header: str, accepted: bool) -> None:
    assert accepts_gzip(header) is accepted


@pytest.mark.parametrize(
    "path",
    [
        f"{BUNDLE_PATH}/x",
        "/app.bundle.js/../../secret.txt",
        "/%2e%2e/secret.txt?v=0",
        "/style.css/?v=1",
    ],
)
async def test_versions_and_the_bundle_open_no_way_out(tmp_path: Path, app_dir: Path, path: str) -> None:
    (tmp_path / "secret.txt").write_text("do not serve me")
    async with running(tmp_path, app_dir=app_dir) as server:
        status, _, body = await http_get(server.port, path, {"If-None-Match": "*", **GZIP})
    assert (status, body) == (404, b"not found\n")


async def test_modules_that_do_not_bundle_are_served_one_by_one_and_say_why(
    tmp_path: Path, app_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (app_dir / "dom.js").write_text('export * from "./cards/card.js";\n')
    async with running(tmp_path, app_dir=app_dir) as server:
        with caplog.at_level(logging.WARNING):
            _, _, index = await http_get(server.port, "/")
            await http_get(server.port, "/")
            status, _, _ = await http_get(server.port, BUNDLE_PATH)
            module, _, _ = await http_get(server.port, "/app.js")
    assert 'src="app.js?v=' in index.decode() and status == 404 and module == 200
    told = [r.getMessage() for r in caplog.records if "do not bundle" in r.getMessage()]
    assert len(told) == 1 and "dom.js" in told[0]  # once, naming the module


def test_the_bundle_is_made_again_only_when_a_module_it_holds_changes(app_dir: Path) -> None:
    files = AppFiles(app_dir)
    first = files.bundle()
    assert first is not None and files.bundle() is first  # the same sources: the bundle kept
    (app_dir / "cards" / "card.js").write_text('export const card = () => "a new card";\n')
    changed = files.bundle()
    assert changed is not None and changed.etag != first.etag and b"a new card" in changed.body
    (app_dir / "dom.js").unlink()  # a module gone: not the old bundle, and modules one by one
    assert files.bundle() is None


def test_the_packaged_app_bundles_without_the_relay_library() -> None:
    script = AppFiles(packaged_app()).bundle()
    assert script is not None, "the App's modules must keep to what transports/modules.py understands"
    text = script.body.decode()
    assert len(gzip.compress(script.body)) < 60_000
    assert '__lineup["relay.js"]' in text and 'import("./vendor/relay.js")' in text
    assert "// Generated by scripts/bundle-app" not in text  # the vendor bundle's banner


def test_lean_leaves_out_what_only_people_read_and_nothing_that_runs() -> None:
    from lineup_plugin.transports.modules import lean

    script = (
        "// a comment\n"
        "/**\n * a block\n * @param {string} x\n */\n"
        "function f(x) {\n"
        "    /** @type {HTMLElement} */ (x).focus(); // a cast at the start: code\n"
        "    /* gone */\n"
        "    /* ends here */ const y = 1;\n"
        "    const t = `line one\n"
        "    // not a comment: in the template\n"
        "      indented`;\n"
        "    return '//' + y;\n"
        "}\n"
    )
    assert lean(script) == (
        "function f(x) {\n"
        "/** @type {HTMLElement} */ (x).focus(); // a cast at the start: code\n"
        "/* ends here */ const y = 1;\n"
        "const t = `line one\n"
        "    // not a comment: in the template\n"
        "      indented`;\n"
        "return '//' + y;\n"
        "}\n"
    )


SERVICE_WORKER_RUN = """
const vm = await import("node:vm");
const fs = await import("node:fs");
const listeners = {};
const shown = [];
const self = {
  addEventListener: (type, listener) => { listeners[type] = listener; },
  registration: { showNotification: async (title, options) => { shown.push({ title, body: options.body }); } },
  clients: {},
};
vm.runInNewContext(fs.readFileSync(process.argv[1], "utf8"), { self, console });  // a classic script
const pushed = async (notice) => {
  let done;
  listeners.push({ data: { json: () => notice }, waitUntil: (promise) => { done = promise; } });
  await done;
};
await pushed({ v: 1, kind: "card", call_id: "c1", tool: "choice", text: "Deploy where?" });
await pushed({ v: 1, kind: "card", call_id: "c2", tool: "weather", text: "Which city?" });
console.log(JSON.stringify(shown));
"""


@pytest.mark.node  # CI must run it (tests/ci_strict.py)
@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_the_service_worker_is_one_classic_script_that_titles_a_card_as_the_page_does(tmp_path: Path) -> None:
    """sw.js imports the titles notify.js uses (titles.js); a service worker runs as a classic script,
    so it is sent, and exported, with its imports joined in."""
    worker = AppFiles(packaged_app()).asset("/sw.js")
    assert worker is not None and worker.content_type.startswith("text/javascript")
    text = worker.body.decode()
    assert '__lineup["titles.js"]' in text and not re.search(r"^\s*(import|export)\b", text, re.M)
    assert export_app(tmp_path / "site") > 0 and (tmp_path / "site" / "sw.js").read_bytes() == worker.body
    (tmp_path / "sw.js").write_bytes(worker.body)
    done = subprocess.run(
        ["node", "--input-type=module", "-e", SERVICE_WORKER_RUN, str(tmp_path / "sw.js")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == [
        {"title": "The agent asks you to choose", "body": "Deploy where?"},
        {"title": "The agent calls weather", "body": "Which city?"},
    ]
