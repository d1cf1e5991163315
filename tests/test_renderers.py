"""Plugin renderers: what the register_renderers hook accepts, and how the direct server serves them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lineup_plugin import Hub, hookimpl, load_registry
from lineup_plugin.errors import RendererError
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.tools.registry import Register
from lineup_plugin.tools.renderers import MAX_RENDERER_BYTES, RegisterRenderer
from tests.plugin_renderers import FIXTURES, PLAIN, renderer_registry
from tests.transports.test_direct import TOKEN, http_get, running

RATING_JS = Path(__import__("lineup_weather").__file__).parent / "rating.js"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


class Knobs:
    """A plugin with App tool ``knob`` and in-process tool ``twist``."""

    @hookimpl
    def register_tools(self, register: Register) -> None:
        def twist(turns: int) -> int:
            """Twist."""
            return turns

        register({"name": "knob", "type": "action", "inputSchema": {"type": "object"}})
        register(twist)


def registry_with(register_renderers: object, tmp_path: Path) -> None:
    """Collect :class:`Knobs`, then another plugin's ``register_renderers``."""
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Knobs(), name="knobs")
    pm.register(register_renderers, name="renderers-of-knobs")
    collect_tools(pm)


def ships(tool: str, module: Path) -> object:
    class Shipper:
        @hookimpl
        def register_renderers(self, register: RegisterRenderer) -> None:
            register(tool, module)

    return Shipper()


# ------------------------------------------------------------------------------ the hook


def test_the_example_plugin_ships_a_renderer_for_rating_only() -> None:
    registry = load_registry()
    rating = registry.renderers.for_tool("rating")
    assert rating is not None and rating.source == "weather"
    assert rating.body == RATING_JS.read_bytes()
    assert rating.path == f"/renderers/{hashlib.sha256(rating.body).hexdigest()}.js"
    assert registry.renderers.for_tool("weather") is None and registry.renderers.for_tool("choice") is None


@pytest.mark.parametrize(
    ("tool", "file", "message"),
    [
        (
            "choice",
            "throws.js",
            "plugin 'renderers-of-knobs': cannot ship a renderer for tool 'choice': the plugin registers no tool of",
        ),
        ("knob", "throws.js", "the plugin registers no tool of that name"),  # another plugin's tool
        ("nothing", "throws.js", "the plugin registers no tool of that name"),
        ("knob", "missing.js", "the renderer of tool 'knob' cannot be read from"),
        ("knob", "throws.py", "must be a .js or .mjs module file, not 'throws.py'"),
    ],
)
def test_a_renderer_for_what_is_not_the_plugins_own_app_tool_is_refused(
    tool: str, file: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(RendererError, match=message):
        registry_with(ships(tool, FIXTURES / file), tmp_path)


def test_a_renderer_for_its_own_tools_only() -> None:
    class Both(Knobs):
        @hookimpl
        def register_renderers(self, register: RegisterRenderer) -> None:
            register("knob", FIXTURES / "throws.js")
            with pytest.raises(RendererError, match="'knob': it has a renderer already"):
                register("knob", FIXTURES / "rejects.js")
            with pytest.raises(RendererError, match="'twist': it runs in the agent's process"):
                register("twist", FIXTURES / "rejects.js")

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Both(), name="both")
    assert collect_tools(pm).renderers.manifest()["renderers"].keys() == {"knob"}


def test_a_huge_or_binary_module_is_refused(tmp_path: Path) -> None:
    huge = tmp_path / "huge.js"
    huge.write_bytes(b"//" + b"x" * MAX_RENDERER_BYTES)
    binary = tmp_path / "binary.mjs"
    binary.write_bytes(b"\xff\xfe\x00export default 1")

    class Both(Knobs):
        @hookimpl
        def register_renderers(self, register: RegisterRenderer) -> None:
            with pytest.raises(RendererError, match="'knob' is larger than 256 KiB"):
                register("knob", huge)
            with pytest.raises(RendererError, match="'knob' is not UTF-8 text"):
                register("knob", binary)
            with pytest.raises(RendererError, match="a renderer's tool must be a tool name"):
                register(42, FIXTURES / "throws.js")  # type: ignore[arg-type]

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Both(), name="both")
    assert len(collect_tools(pm).renderers) == 0


# ------------------------------------------------------------------------------ serving


async def test_a_registered_module_is_served_by_its_digest_as_an_immutable_module(tmp_path: Path) -> None:
    registry = renderer_registry()
    rating = registry.renderers.for_tool("rating")
    assert rating is not None
    async with running(tmp_path, hub=Hub(registry)) as server:
        status, headers, body = await http_get(server.port, rating.path)
        assert status == 200 and body == RATING_JS.read_bytes()
        assert headers["content-type"] == "text/javascript; charset=utf-8"
        assert headers["cache-control"] == "public, max-age=31536000, immutable"
        assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    "path",
    [
        "/renderers/" + "0" * 64 + ".js",  # no module has that digest
        "/renderers/../index.html",
        "/renderers/%2e%2e/app.js",
        "/renderers/rating.js",
        "/renderers/",
    ],
)
async def test_nothing_else_is_served_under_renderers(path: str, tmp_path: Path) -> None:
    async with running(tmp_path, hub=Hub(renderer_registry())) as server:
        status, _, body = await http_get(server.port, path)
        assert status == 404 and b"export" not in body


async def test_the_manifest_needs_the_token(tmp_path: Path) -> None:
    registry = renderer_registry()
    async with running(tmp_path, hub=Hub(registry)) as server:
        status, headers, body = await http_get(server.port, "/api/renderers")
        assert status == 401 and headers["www-authenticate"] == "Bearer"
        assert json.loads(body) == {"error": "missing token: send Authorization: Bearer <token>"}
        status, _, body = await http_get(
            server.port, "/api/renderers", {"Authorization": "Bearer wrong-token-xxxxxxxx"}
        )
        assert status == 401 and json.loads(body) == {"error": "wrong token"}
        assert server.throttle.failures("127.0.0.1") == 1
        status, headers, body = await http_get(server.port, "/api/renderers", BEARER)
        assert status == 200 and headers["cache-control"] == "no-cache"
        manifest = json.loads(body)["renderers"]
        assert PLAIN not in manifest and "choice" not in manifest
        assert manifest["rating"] == registry.renderers.for_tool("rating").path  # type: ignore[union-attr]
        assert server.throttle.failures("127.0.0.1") == 0  # the right token clears the slow-down


async def test_an_unknown_api_path_is_a_clear_404(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        status, _, body = await http_get(server.port, "/api/secrets", BEARER)
        assert status == 404 and "no such endpoint '/api/secrets'" in json.loads(body)["error"]
