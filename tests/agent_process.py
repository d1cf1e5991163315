"""A LineUp agent in a process of its own, for the restart tests (run it, kill it, run it again).

It runs what the Hermes adapter runs: a :class:`Runner` (hub, SQLite store from the settings,
direct server) on 127.0.0.1 with a free port and ``LINEUP_*`` settings from the environment.
Its first stdout line is JSON: ``{"port": ..., "recovered": [{"call_id", "state", "message"}...]}``.
With ``--call`` it then waits for an App and asks it one ``choice``, printing ``{"result": ...}``
when the call ends. It serves until it is killed. With ``--relay API_URL`` it serves by relay
instead (a WuKongIM server at that address; agent ``lineup-agent``, App user ``app-user``, the
devices paired in the data directory), and ``port`` is null.

    python tests/agent_process.py --data-dir DIR [--call] [--relay API_URL]
"""

from __future__ import annotations

import argparse
import json
import threading

from lineup_plugin.config.settings import load_settings
from lineup_plugin.runtime.loop import Runner
from lineup_plugin.transports.direct.server import DirectServer

QUESTION = {"question": "Deploy where?", "options": ["staging", "production"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--call", action="store_true", help="ask one choice once an App is attached")
    parser.add_argument("--relay", metavar="API_URL", help="serve by relay through the WuKongIM server at API_URL")
    args = parser.parse_args()
    if args.relay:
        relay = {"api_url": args.relay, "uid": "lineup-agent", "app_uid": "app-user", "text_cards": "never"}
        settings = load_settings({"mode": "relay", "data_dir": args.data_dir, "wukongim": relay})
    else:
        settings = load_settings({"mode": "direct", "host": "127.0.0.1", "port": 0, "data_dir": args.data_dir})
    runner = Runner(settings)
    runner.start()
    server = runner.transport
    assert args.relay or isinstance(server, DirectServer)
    recovered = [
        {"call_id": c.call_id, "state": str(c.state), "message": c.result.result.get("message") if c.result else None}
        for c in runner.hub.recovered
    ]
    port = server.port if isinstance(server, DirectServer) else None
    print(json.dumps({"port": port, "recovered": recovered}), flush=True)
    if args.call:
        runner.run(runner.hub.wait_for_device)
        result = runner.call_blocking("choice", QUESTION)
        print(json.dumps({"result": result.model_dump(mode="json")}), flush=True)
    threading.Event().wait()  # serve until killed


if __name__ == "__main__":
    main()
