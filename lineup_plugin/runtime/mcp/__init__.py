"""LineUp as an MCP server (``lineup mcp``): the tool catalog for any MCP client, answered on the App.

:class:`McpRuntime` is the :class:`~lineup_plugin.runtime.base.AgentRuntime` of an MCP server;
:class:`LineUpMcpServer` is the official ``mcp`` SDK's low-level server around it, served over
stdio (:func:`serve_stdio`) or streamable HTTP (:func:`serve_http`). Needs the ``mcp`` extra
(``pip install 'lineup-plugin[mcp]'``).
"""

from __future__ import annotations

from .runtime import McpRuntime
from .server import LineUpMcpServer, call_result, serve_http, serve_stdio

__all__ = ["LineUpMcpServer", "McpRuntime", "call_result", "serve_http", "serve_stdio"]
