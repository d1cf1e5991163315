"""The fault rig's agent process: one hub + SQLite store + direct server per App, and a caller per App.

    python -m tests.rig.agent --data-dir DIR --apps K --calls N [--kill POINT@N] [--store-fault KIND@N[+M]]

Like the agent of ``benchmarks/load.py``, with the process wrapped from the inside (test-side code
only, nothing in ``lineup_plugin`` changes) so that it can:

- **SIGKILL itself** at the Nth occurrence of a named point of the call lifecycle (``--kill``; the
  names are :data:`POINTS`): before/after ``start_call``, before/after each commit by the states it
  writes, before/after handing each kind of message to a link, before/after receiving each kind,
  before/after the caller gets its result;
- **fail its store** (``--store-fault``): ``disk_full`` and ``io_error`` make the SQLite write of a
  call raise inside :meth:`SQLiteStore.apply` (the real rollback path runs); ``unserializable``
  makes serialising the row raise ``TypeError`` (a value the store cannot write).

Stdout, one JSON object a line: ``{"ports": [...], "recovered": {app: [[call_id, state]...]}}``, then
``{"started": call_id, "app": i}`` once a call exists in the session, ``{"ended": call_id, "app": i,
"status": ..., "result": ...}`` when the caller gets its result, ``{"event": "calls-done"}``; after a
line on stdin, ``{"report": ...}`` (every known call's stored state, terminal audit counts, the
points passed, peak RSS) and it exits. Calls whose id is listed in ``--skip FILE`` are not made
again (an agent that restarts does not replay the model's calls).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from lineup_plugin.config.settings import Settings
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import load_registry
from lineup_plugin.protocol.calls import TERMINAL
from lineup_plugin.protocol.session import SaveCall, Session
from lineup_plugin.store import SQLiteStore, open_store
from lineup_plugin.transports.direct.server import DirectLink, DirectServer, Limits

TOKEN = "rig-token-0123456789abcdef"
OPTIONS = ["staging", "production"]
QUESTION = {"question": "Deploy where?", "options": OPTIONS}
LIMITS = Limits(message_rate=1e6, message_burst=1_000_000, hello_timeout=2.0)
TERMINAL_EVENTS = {f"call.{state}" for state in TERMINAL}
STATES = ["delivered", "waiting_user", "completed", "cancelled", "expired"]
SENT = ["tool.call", "tool.cancel", "device.welcome"]
RECEIVED = ["device.hello", "tool.ack", "tool.result", "tool.cancel"]

#: every named point the agent can be killed at
POINTS: list[str] = [
    "start_call.before",
    "start_call.after",
    *(f"apply.{when}.{state}" for state in STATES for when in ("before", "after")),
    *(f"send.{when}.{kind}" for kind in SENT for when in ("before", "after")),
    *(f"receive.{when}.{kind}" for kind in RECEIVED for when in ("before", "after")),
    "caller.before_result",
    "caller.after_result",
]

passed: Counter[str] = Counter()
kill_at: tuple[str, int] | None = None


def point(name: str) -> None:
    """Pass the named point; SIGKILL this process at the chosen occurrence."""
    passed[name] += 1
    if kill_at is not None and kill_at[0] == name and passed[name] == kill_at[1]:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def kind_of(text: str | bytes) -> str:
    try:
        kind = json.loads(text)["type"]
        return kind.removeprefix("lineup.v1.") if isinstance(kind, str) else "?"
    except (ValueError, TypeError, KeyError):
        return "?"


def instrument(store_fault: tuple[str, int, int] | None) -> None:
    """Wrap the session, the store, the links and the hub (this process only)."""
    start_call = Session.start_call

    def wrapped_start_call(self: Session[Any], request: Any, **options: Any) -> Any:
        point("start_call.before")
        call = start_call(self, request, **options)
        point("start_call.after")
        return call

    Session.start_call = wrapped_start_call  # type: ignore[method-assign]

    apply = SQLiteStore.apply
    applied = Counter[str]()

    def wrapped_apply(self: SQLiteStore, changes: Any) -> None:
        changes = list(changes)
        states = sorted({str(c.call.state) for c in changes if isinstance(c, SaveCall)})
        for state in states:
            point(f"apply.before.{state}")
        if states and store_fault is not None:
            kind, first, count = store_fault
            applied["n"] += 1
            if first <= applied["n"] < first + count:
                passed[f"fault.{kind}"] += 1
                self._save_row = broken(kind)  # type: ignore[method-assign]
        try:
            apply(self, changes)
        finally:
            self.__dict__.pop("_save_row", None)
        for state in states:
            point(f"apply.after.{state}")

    SQLiteStore.apply = wrapped_apply  # type: ignore[method-assign]

    send = DirectLink.send

    def wrapped_send(self: DirectLink, text: str) -> None:
        kind = kind_of(text)
        point(f"send.before.{kind}")
        send(self, text)
        point(f"send.after.{kind}")

    DirectLink.send = wrapped_send  # type: ignore[method-assign]

    receive_now = Hub.receive_now  # the direct server's reading calls it, as does Hub.receive

    def wrapped_receive_now(self: Hub, link: Any, text: str | bytes, **options: Any) -> list[Any]:
        kind = kind_of(text)
        point(f"receive.before.{kind}")
        events = receive_now(self, link, text, **options)
        point(f"receive.after.{kind}")
        return events

    Hub.receive_now = wrapped_receive_now  # type: ignore[method-assign]


def broken(kind: str) -> Any:
    def save_row(call: Any) -> None:
        if kind == "disk_full":
            raise sqlite3.OperationalError("database or disk is full")
        if kind == "io_error":
            raise sqlite3.OperationalError("disk I/O error")
        json.dumps({"call": call.call_id, "value": object()})  # TypeError: not JSON serializable

    return save_row


async def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    skip: set[str] = set(json.loads(Path(args.skip).read_text())) if args.skip else set()
    agents: list[tuple[Hub, DirectServer]] = []
    recovered: dict[int, list[list[str]]] = {}
    for index in range(args.apps):
        settings = Settings(
            mode="direct",
            host="127.0.0.1",
            port=0,
            token=TOKEN,
            data_dir=Path(args.data_dir) / f"agent-{index}",
            store="sqlite",
            deadline=args.deadline,
        )
        hub = Hub(
            load_registry(load_entrypoints=False),
            store=open_store(settings),
            conversation_id=f"conv-{index}",
            deadline=args.deadline,
        )
        recovered[index] = [[c.call_id, str(c.state)] for c in hub.recovered]
        server = DirectServer.from_settings(hub, settings, limits=LIMITS)
        await server.start()
        agents.append((hub, server))
    emit({"ports": [server.port for _, server in agents], "recovered": recovered})

    async def ask(index: int, numbers: list[int]) -> None:
        hub, server = agents[index]
        for number in numbers:
            call_id = f"call-{index}-{number:04d}"
            if call_id in skip:
                continue
            await server.wait_for_device()
            emit({"started": call_id, "app": index, "number": number})
            waiter = asyncio.create_task(hub.call("choice", QUESTION, call_id=call_id))
            if rng.random() < args.p_interrupt:  # the runtime is interrupted while the call waits
                await asyncio.sleep(rng.uniform(0, 0.05))
                waiter.cancel()
            try:
                result = await waiter
                status, outcome = result.status, result.result
            except asyncio.CancelledError:  # the store has the truth (an answer may have won the race)
                saved = hub.store.get_call(call_id)
                status = saved.result.status if saved is not None and saved.result is not None else "lost"
                outcome = saved.result.result if saved is not None and saved.result is not None else {}
            point("caller.before_result")
            emit({"ended": call_id, "app": index, "status": status, "result": outcome})
            point("caller.after_result")

    async def agent(index: int) -> None:
        workers = [list(range(args.calls))[w :: args.concurrency] for w in range(args.concurrency)]
        await asyncio.gather(*(ask(index, numbers) for numbers in workers if numbers))

    await asyncio.gather(*(agent(index) for index in range(len(agents))))
    emit({"event": "calls-done"})
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    report: dict[str, Any] = {"apps": {}, "points": dict(passed)}
    for index, (hub, server) in enumerate(agents):
        await server.close()
        store = hub.store
        terminal = Counter(c for event, c, _, _ in store.audit_log if event in TERMINAL_EVENTS)  # type: ignore[attr-defined]
        calls = {}
        for row in store._db.execute("SELECT call_id FROM calls").fetchall():  # type: ignore[attr-defined]
            saved = store.get_call(row[0])
            assert saved is not None
            calls[row[0]] = {
                "state": str(saved.state),
                "result": saved.result.result if saved.result is not None else None,
                "ends": terminal[row[0]],
            }
        report["apps"][index] = {"calls": calls, "pending": [c.call_id for c in store.pending_calls()]}
        store.close()
    report["max_rss_kib"] = peak_rss_kib()
    emit({"report": report})


def peak_rss_kib() -> int:
    """This process's own peak RSS (``VmHWM``, reset by exec).

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: on Linux that keeps the peak of the process that
    forked us (a test runner that started Chromium before: hundreds of MiB that are not ours).
    """
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    global kill_at
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--apps", type=int, default=1)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--p-interrupt", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip", help="a JSON file: the call ids already made")
    parser.add_argument("--kill", help="POINT@N: SIGKILL at the Nth pass of POINT")
    parser.add_argument("--store-fault", help="KIND@N[+M]: fail the Nth (to N+M-1th) commit writing a call")
    args = parser.parse_args()
    if args.kill:
        name, _, nth = args.kill.partition("@")
        kill_at = (name, int(nth or 1))
    fault = None
    if args.store_fault:
        kind, _, rest = args.store_fault.partition("@")
        first, _, count = rest.partition("+")
        fault = (kind, int(first or 1), int(count or 1))
    instrument(fault)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
