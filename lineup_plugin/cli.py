"""The ``lineup`` command.

- ``lineup demo [--host H] [--port P] [--token T] [--data-dir D]``: the direct server with a
  scripted agent that uses every built-in tool (see :mod:`lineup_plugin.demo`);
- ``lineup tools [--json]``: the tool catalog (name, type, actions, source plugin);
- ``lineup mcp [--http HOST:PORT]``: an MCP server (stdio by default) whose tools are answered on
  the App, which this process serves (see :mod:`lineup_plugin.runtime.mcp`);
- ``lineup stats [--since DURATION|ISO] [--json]``: per tool and status, counts, answer times and
  error rates, from the store's audit log (see :mod:`lineup_plugin.stats`);
- ``lineup pair [--link APP_URL | --revoke]``: the relay pairing: who is paired, a link that opens
  an exported App already paired, or revoke every pairing;
- ``lineup app export DIR``: the App as static files for an HTTPS static host;
- ``lineup doctor [--json]``: check settings, files, port, forwarding, Hermes, App, relay and
  push, each failure with its fix (see :mod:`lineup_plugin.doctor`); status 1 if one fails.
- ``lineup --version``: the installed version.

Settings not given as options come from ``LINEUP_*`` environment variables. A bad setting
prints what is wrong and exits with status 2; any other LineUp error exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .config.settings import Settings, load_settings
from .errors import ConfigError, LineUpError, StoreBusyError, TransportError
from .plugins import load_registry
from .tools.registry import Registry


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lineup``."""
    parser = argparse.ArgumentParser(prog="lineup", description="LineUp: agent tools that live on the user's App.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the server does")
    parser.add_argument("--version", action="version", version=f"lineup {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="serve the App with a scripted agent that uses every built-in tool")
    demo.add_argument("--host", help="address to listen on (default 0.0.0.0: every interface)")
    demo.add_argument("--port", type=int, help="port to listen on (default 9527; 0 picks a free one)")
    demo.add_argument("--token", help="the token the App must send (default: generated and kept in the data dir)")
    demo.add_argument("--data-dir", help="where the token and the call store are kept (default ~/.hermes/lineup)")
    demo.set_defaults(run=run_demo)

    tools = commands.add_parser("tools", help="list every tool the installed plugins provide")
    tools.add_argument("--json", action="store_true", help="print the tool definitions as JSON")
    tools.set_defaults(run=run_tools)

    mcp = commands.add_parser("mcp", help="run an MCP server (stdio) whose tools are answered on the App")
    mcp.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp instead")
    mcp.add_argument("--data-dir", help="where the token and the call store are kept (default ~/.hermes/lineup)")
    mcp.set_defaults(run=run_mcp)

    stats = commands.add_parser("stats", help="per tool and status: counts, answer times, error rates")
    stats.add_argument("--since", metavar="DURATION|ISO", help="only calls created since: 1h, 30m, 7d, or an ISO time")
    stats.add_argument("--json", action="store_true", help="print the figures as JSON")
    stats.add_argument("--data-dir", help="where the call store is kept (default ~/.hermes/lineup)")
    stats.set_defaults(run=run_stats)

    pair = commands.add_parser("pair", help="relay pairing: show who is paired, make a pairing link, or revoke")
    action = pair.add_mutually_exclusive_group()
    action.add_argument("--link", metavar="APP_URL", help="pair a new device: print APP_URL#pair=... (keep it secret)")
    action.add_argument("--revoke", action="store_true", help="revoke every paired App (new App token, keys dropped)")
    pair.add_argument("--data-dir", help="where the pairing is kept (default ~/.hermes/lineup)")
    pair.set_defaults(run=run_pair)

    app = commands.add_parser("app", help="the reference App")
    app_commands = app.add_subparsers(dest="app_command", required=True, metavar="ACTION")
    export = app_commands.add_parser("export", help="write the App as static files for an HTTPS static host")
    export.add_argument("dir", help="an empty or new directory")
    export.set_defaults(run=run_app_export)

    doctor = commands.add_parser("doctor", help="check what LineUp needs here; each failure with its fix")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.add_argument("--data-dir", help="the data directory to check (default: as the settings say)")
    doctor.set_defaults(run=run_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lineup`` with ``argv`` (default: the command line); returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        status: int = args.run(args)
    except ConfigError as exc:
        print(f"lineup: error: {exc}", file=sys.stderr)
        return 2
    except LineUpError as exc:
        print(f"lineup: error: {exc}", file=sys.stderr)
        return 1
    return status


def _stop_on_sigterm() -> None:
    """Let SIGTERM (a service manager, an MCP client stopping us) cancel the current task, like Ctrl+C.

    Windows' event loop has no signal handlers: there Ctrl+C and end of input still stop us.
    """
    main_task = asyncio.current_task()
    assert main_task is not None
    if sys.platform != "win32":
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)


def run_demo(args: argparse.Namespace) -> int:
    """``lineup demo``: serve until Ctrl+C."""
    from .demo import Demo

    given = {"host": args.host, "port": args.port, "token": args.token, "data_dir": args.data_dir}
    settings = load_settings({key: value for key, value in given.items() if value is not None})

    async def serve() -> None:
        _stop_on_sigterm()
        async with Demo(settings) as demo:
            await demo.run()

    try:
        asyncio.run(serve())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\nlineup demo stopped", file=sys.stderr)
    return 0


def catalog(registry: Registry) -> list[dict[str, Any]]:
    """One row per tool: ``{name, type, actions, source}`` (``actions`` empty for an action tool)."""
    return [
        {
            "name": tool.name,
            "type": tool.definition.type,
            "actions": tool.definition.action_names(),
            "source": tool.source,
        }
        for tool in registry
    ]


def run_tools(args: argparse.Namespace) -> int:
    """``lineup tools``: print the catalog as a table, or the wire definitions as JSON."""
    registry = load_registry()
    if args.json:
        definitions = [tool.model_dump(mode="json", exclude_none=True) for tool in registry.definitions()]
        print(json.dumps(definitions, indent=2, ensure_ascii=False))
        return 0
    rows = [("NAME", "TYPE", "ACTIONS", "SOURCE")]
    rows += [(r["name"], r["type"], ",".join(r["actions"]) or "-", r["source"]) for r in catalog(registry)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3])
    return 0


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8000`` for IPv6) as a pair; raises ConfigError when it is not one."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--http: expected HOST:PORT (port 0: a free one), e.g. 127.0.0.1:8000, not {text!r}")
    return host, int(port)


def run_mcp(args: argparse.Namespace) -> int:
    """``lineup mcp``: serve MCP until the client leaves (stdio) or SIGINT/SIGTERM (HTTP)."""
    try:
        from .runtime.mcp import McpRuntime, serve_http, serve_stdio
    except ImportError as exc:
        raise ConfigError(f"lineup mcp needs the mcp extra: pip install 'lineup-plugin[mcp]' ({exc})") from exc

    address = host_port(args.http) if args.http else None
    given = {"data_dir": args.data_dir} if args.data_dir else {}
    settings = load_settings(given)
    runtime = McpRuntime(settings, load_registry)

    async def serve() -> None:
        _stop_on_sigterm()  # a client stopping us ends as cleanly as end of input
        await (serve_stdio(runtime) if address is None else serve_http(runtime, *address))

    try:
        asyncio.run(serve())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        runtime.service.stop()
    return 0


def run_stats(args: argparse.Namespace) -> int:
    """``lineup stats``: the metering of the store's audit log, as a table or JSON."""
    from .stats import format_table, parse_since, read_stats

    given = {"data_dir": args.data_dir} if args.data_dir else {}
    settings = load_settings(given)
    since = parse_since(args.since) if args.since else None
    try:
        report = read_stats(settings, since=since).as_json()
    except StoreBusyError as exc:
        report = _stats_of_the_server(settings, since, exc)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(format_table(report))
    return 0


def run_pair(args: argparse.Namespace) -> int:
    """``lineup pair``: the pairing state, a pairing link (``--link``), or revoke (``--revoke``)."""
    from .transports.wukongim import pair_command

    settings = load_settings({"data_dir": args.data_dir} if args.data_dir else {})
    if args.revoke:
        print(asyncio.run(pair_command.revoke(settings)))
    elif args.link:
        from .qr import terminal_qr

        link = asyncio.run(pair_command.pair_link(settings, args.link))
        print("Open this link on the phone (it holds the keys: never share or log it):", link, sep="\n")
        print(terminal_qr(link))
    else:
        print(pair_command.pairing_status(settings))
    return 0


def run_app_export(args: argparse.Namespace) -> int:
    """``lineup app export DIR``: copy the App's files; the next steps for a person."""
    from pathlib import Path

    from .transports.wukongim.pair_command import export_app

    count = export_app(Path(args.dir))
    print(
        f"wrote {count} files to {args.dir}. Put them on any HTTPS static host, then pair a phone with "
        "`lineup pair --link https://<that address>/` (it connects by relay)."
    )
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    """``lineup doctor``: every check, as a table or JSON; status 0 only when none failed."""
    from pathlib import Path

    from . import doctor

    context = doctor.Context(data_dir=Path(args.data_dir) if args.data_dir else None)
    try:
        return doctor.report(doctor.run(context), as_json=args.json)
    except KeyboardInterrupt:
        print("\nlineup doctor interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # its reader went away (`lineup doctor | head`): nothing more to say
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # the checks catch their own errors: this is the report itself failing
        print(f"lineup doctor: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _stats_of_the_server(settings: Settings, since: float | None, busy: StoreBusyError) -> dict[str, Any]:
    """The metering of the process that holds the store, asked over its direct server's API."""
    from .transports.direct.api import request_stats

    try:
        data: dict[str, Any] = request_stats(
            settings.host,
            settings.port,
            settings.token,
            settings.data_dir,
            since=since,
            tls=settings.tls_cert is not None,
        )
    except TransportError as exc:
        from .runtime.lock import ServerLock

        owner = ServerLock(settings.data_dir).owner()
        raise StoreBusyError(f"{busy} ({owner or 'unknown'}) and {exc}; run lineup stats once it has stopped") from exc
    return data


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
