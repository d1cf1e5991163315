"""The card page an MCP Apps host (SEP-1865) shows inline: one self-contained HTML document per tool.

It is built from the reference App's own files — ``style.css``, the card modules under
``cards/``, and ``mcp-view.js``, the page's entry that speaks the host's ``postMessage``
JSON-RPC bridge — so the host draws a card exactly as the App does, with no code written twice.
A host renders the page in a sandboxed iframe from an inline document (no other file can be
fetched), so the ES modules are joined into one inline script by
:func:`~lineup_plugin.transports.modules.bundle` (which states what it understands; a test
bundles every tool's page).

A plugin's renderer for its tool (:mod:`lineup_plugin.tools.renderers`) is bundled in place of
``plugin-renderer.js``; one that cannot be bundled (it imports other files, say) leaves the
host's card ``unsupported`` (the phone's App still loads it) and is logged.
"""

from __future__ import annotations

import json
import logging
import re
from importlib.resources.abc import Traversable

from ...errors import RendererError
from ...tools.renderers import Renderer
from ...transports.app_files import packaged_app
from ...transports.modules import bundle, imports_anything

__all__ = ["APP_MIME_TYPE", "bundle", "card_page", "card_uri", "packaged_app", "tool_of"]

log = logging.getLogger(__name__)

#: the MIME type of an MCP Apps page
APP_MIME_TYPE = "text/html;profile=mcp-app"
#: where the card page of tool ``<name>`` is read: ``ui://lineup/card/<name>``
URI_PREFIX = "ui://lineup/card/"
#: the page's entry module, in the App's directory
ENTRY = "mcp-view.js"
#: the module a plugin's renderer replaces in a tool's page
PLUGIN_MODULE = "plugin-renderer.js"
#: what the page itself allows (the host applies its own policy too): nothing but its inline code
PAGE_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"
)


def card_uri(tool: str) -> str:
    """The ``ui://`` address of ``tool``'s card page."""
    return f"{URI_PREFIX}{tool}"


def tool_of(uri: str) -> str | None:
    """The tool whose card page ``uri`` names, or None."""
    return uri[len(URI_PREFIX) :] if uri.startswith(URI_PREFIX) and len(uri) > len(URI_PREFIX) else None


def card_page(tool: str, *, label: str, renderer: Renderer | None = None, app: Traversable | None = None) -> str:
    """The card page of ``tool`` (``label`` names it for people), with its plugin's ``renderer`` if any."""
    root = app if app is not None else packaged_app()

    def read_app(path: str) -> str:
        return root.joinpath(*path.split("/")).read_text(encoding="utf-8")

    read = read_app
    if renderer is not None:
        module = renderer.body.decode("utf-8")

        def read_with_plugin(path: str) -> str:
            return module if path == PLUGIN_MODULE else read_app(path)

        try:
            if imports_anything(module):
                raise RendererError("a renderer module imports nothing (it gets h in its context)")
            script = bundle(read_with_plugin, ENTRY)
        except RendererError as exc:
            log.warning("lineup mcp: the renderer of %s is left out of the MCP Apps card: %s", tool, exc)
        else:
            return _page(tool, label, script, read_app("style.css"))
    return _page(tool, label, bundle(read, ENTRY), read_app("style.css"))


def _page(tool: str, label: str, script: str, style: str) -> str:
    data = json.dumps({"tool": tool, "label": label})
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta http-equiv="Content-Security-Policy" content="{PAGE_POLICY}">',
            '<meta name="color-scheme" content="light dark">',
            f"<title>LineUp: {_text(label)}</title>",
            f"<style>\n{_inline(style, 'style')}\n</style>",
            f'<script type="application/json" id="lineup-view">{_inline(data, "script")}</script>',
            f'<script type="module">\n{_inline(script, "script")}\n</script>',
            "</head>",
            '<body class="mcp-view">',
            '<main id="feed" class="feed" aria-label="LineUp card"></main>',
            "</body>",
            "</html>",
            "",
        ]
    )


def _inline(text: str, tag: str) -> str:
    """``text`` safe inside a ``<tag>`` element: it can neither close it early nor open a comment there."""
    return re.sub(rf"</(?={tag})", r"<\\/", text, flags=re.I).replace("<!--", "<\\!--")


def _text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
