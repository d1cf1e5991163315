"""Load test: many Apps, many calls, real WebSockets on 127.0.0.1, and nothing may be lost.

    python benchmarks/load.py [--apps 100] [--calls 100] [--seed 1] [--store sqlite|memory] ...

An agent process (this script with ``--role agent``) runs one agent per App: a hub with its own
store (SQLite by default, one file each) and a direct server on 127.0.0.1, port 0. Each agent
asks its App ``--calls`` choices, ``--concurrency`` at a time, and interrupts some of its waits.
This process runs the Apps over real WebSockets. They answer after random delays, some twice (the
same envelope again, or a different second answer), some late (after the deadline), some never;
they drop the connection at random (before an answer, or right after one) and reconnect with the
cards they still show. At the end every App reconnects once more to have its open cards closed.

Then the invariants are checked, and the exit status is 1 if any breaks:

- every call ends in exactly one terminal status (the agent's view, the store and its audit log agree);
- none lost: every answer the agent accepted is the App's first answer to that call, and a call the
  App answered and never heard was refused is completed or rejected with that answer;
- none duplicated: repeated or second answers never change a result; no call is left pending;
- no card dangles: every card an App showed was answered or closed with a reason.

It prints the counts per status, the duplicates refused, the reconnects and the wall time. Every
run is bounded: ``--apps`` and ``--calls`` are capped and ``--timeout`` stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from lineup_plugin.config.settings import Settings
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import load_registry
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import TERMINAL, parse_timestamp
from lineup_plugin.protocol.messages import (
    Actor,
    DeviceHello,
    Error,
    Payload,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolResult,
)
from lineup_plugin.store import open_store
from lineup_plugin.transports.direct.server import DirectServer, Limits

TOKEN = "load-test-token-0123456789"
OPTIONS = ["test", "staging", "production"]
QUESTION = {"question": "Deploy where?", "options": OPTIONS}
MAX_APPS = 500
MAX_CALLS = 1_000
#: the flood guard is not under test here (tests/test_robustness.py covers it)
LIMITS = Limits(message_rate=1e6, message_burst=1_000_000)
TERMINAL_EVENTS = {f"call.{state}" for state in TERMINAL}


# ------------------------------------------------------------------------------ the agent process


@dataclass
class AgentCall:
    """What one agent saw of one of its calls."""

    status: str
    result: dict[str, Any]
    interrupted: bool = False


def lose_first_answer(hub: Hub) -> None:
    """A planted bug (``--fault lose-answer``): the hub silently drops the first answer it gets."""
    receive = hub.session._on_result
    lost: list[str] = []

    def on_result(link: Any, device_id: str, result: ToolResult, ref: str, known: Any) -> None:
        if not lost:
            lost.append(result.call_id)
            return
        receive(link, device_id, result, ref, known)

    hub.session._on_result = on_result  # type: ignore[method-assign]


async def run_agent(args: argparse.Namespace) -> int:
    """One hub + store + direct server per App; ask, then report what happened to every call."""
    rng = random.Random(args.seed + 1)
    run_dir = Path(args.data_dir)
    agents: list[tuple[Hub, DirectServer]] = []
    for index in range(args.apps):
        settings = Settings(
            mode="direct",
            host="127.0.0.1",
            port=0,
            token=TOKEN,
            data_dir=run_dir / f"agent-{index}",
            store=args.store,
            fsync=args.fsync,
        )
        hub = Hub(load_registry(load_entrypoints=False), store=open_store(settings), conversation_id=f"conv-{index}")
        if args.fault == "lose-answer" and index == 0:
            lose_first_answer(hub)
        server = DirectServer.from_settings(hub, settings, limits=LIMITS)
        await server.start()
        agents.append((hub, server))
    print(json.dumps({"ports": [server.port for _, server in agents]}), flush=True)

    seen: list[dict[str, AgentCall]] = [{} for _ in agents]

    async def ask(index: int, count: int) -> None:
        hub, server = agents[index]
        for _ in range(count):
            await server.wait_for_device()  # a real agent would get "no App connected"; here every call is made
            call_id = codec.new_id("call")
            deadline = args.deadline
            waiter = asyncio.create_task(hub.call("choice", QUESTION, call_id=call_id, deadline=deadline))
            interrupt = rng.random() < args.p_interrupt
            done, _ = await asyncio.wait({waiter}, timeout=rng.uniform(0, args.max_delay) if interrupt else None)
            if not done:
                waiter.cancel()  # the runtime was interrupted: the hub cancels the call on the App
            try:
                result = await waiter
                seen[index][call_id] = AgentCall(result.status, result.result)
            except asyncio.CancelledError:
                # An answer may have won the race with the interrupt: the store has the truth.
                ended = hub.store.get_call(call_id)
                status = ended.result.status if ended is not None and ended.result is not None else "lost"
                outcome = ended.result.result if ended is not None and ended.result is not None else {}
                seen[index][call_id] = AgentCall(status, outcome, interrupted=True)

    async def agent(index: int) -> None:
        per_worker = [
            args.calls // args.concurrency + (w < args.calls % args.concurrency) for w in range(args.concurrency)
        ]
        await asyncio.gather(*(ask(index, n) for n in per_worker if n))

    await asyncio.gather(*(agent(index) for index in range(len(agents))))
    print(json.dumps({"event": "calls-done"}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # the Apps' final reconnects

    report: dict[str, Any] = {"calls": {}, "audit": Counter(), "violations": []}
    for index, (hub, server) in enumerate(agents):
        await server.close()
        store = hub.store
        if store.pending_calls():
            report["violations"].append(f"agent {index}: {len(store.pending_calls())} calls still pending")
        log: list[tuple[str, str | None, str | None, str]] = list(store.audit_log)  # type: ignore[attr-defined]
        terminal = Counter(call_id for event, call_id, _, _ in log if event in TERMINAL_EVENTS)
        refused = Counter(call_id for event, call_id, _, _ in log if event == "result.refused")
        report["audit"].update(event for event, *_ in log)
        for call_id, mine in seen[index].items():
            saved = store.get_call(call_id)
            stored = saved.result.status if saved is not None and saved.result is not None else None
            if stored != mine.status or (
                saved is not None and saved.result is not None and saved.result.result != mine.result
            ):
                report["violations"].append(f"{call_id}: the agent saw {mine.status}, the store has {stored}")
            if terminal[call_id] != 1:
                report["violations"].append(f"{call_id}: {terminal[call_id]} terminal audit records")
            report["calls"][call_id] = {
                "app": index,
                "status": mine.status,
                "result": mine.result,
                "interrupted": mine.interrupted,
                "refused": refused[call_id],
            }
        store.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    (run_dir / "agent-report.json").write_text(json.dumps(report), encoding="utf-8")
    print(json.dumps({"event": "reported"}), flush=True)
    return 0


# -------------------------------------------------------------------------------------- the Apps


@dataclass
class AppStats:
    """What one App did and saw."""

    cards: set[str] = field(default_factory=set)  # every call shown
    closed: dict[str, str | None] = field(default_factory=dict)  # call_id -> why the agent closed the card
    answered: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # the first answer
    second_answers: Counter[str] = field(default_factory=Counter)  # call_id -> different answers sent after it
    resent: Counter[str] = field(default_factory=Counter)  # call_id -> copies of the first answer's envelope
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def shown(self) -> list[str]:
        """The cards still on screen (answered ones too, until the agent closes them): ``open_calls``."""
        return sorted(self.cards - self.closed.keys())


class App:
    """One App device: answers cards with random timing, duplicates and disconnects.

    Only the reader task touches the connection's lifecycle: anything that wants to drop it sets
    ``dropping`` and closes it, and the reader reconnects with the cards it still shows.
    """

    def __init__(self, index: int, port: int, args: argparse.Namespace, rng: random.Random) -> None:
        self.index = index
        self.device_id = f"app-{index}"
        self.url = f"ws://127.0.0.1:{port}/ws"
        self.args = args
        self.rng = rng
        self.stats = AppStats()
        self.ws: ClientConnection | None = None
        self.answering: dict[str, asyncio.Task[None]] = {}
        self.late: set[str] = set()
        self.dropping = False
        self.settled = asyncio.Event()  # set while no drop is under way
        self.settled.set()
        self.quiet = False  # the final phase: no more random behaviour
        self.reader: asyncio.Task[None] | None = None

    def state(self) -> str:
        """Where this App stands (printed when the run gives up)."""
        reading = "no reader" if self.reader is None else "reader done" if self.reader.done() else "reading"
        return (
            f"{self.device_id}: {reading}; connection {self.ws.state.name if self.ws else 'never opened'}; "
            f"dropping {self.dropping}; final phase {self.quiet}; cards open {self.stats.shown[:3]}; "
            f"answers planned {len(self.answering)}"
        )

    def encode(self, payload: Payload, *, id: str | None = None) -> str:
        message = codec.envelope(
            payload,
            sender=Actor(kind="device", id=self.device_id),
            target=Actor(kind="agent", id="lineup-agent"),
            conversation_id=f"conv-{self.index}",
            id=id,
        )
        return codec.encode(message)

    async def connect(self) -> ClientConnection:
        self.ws = await connect(self.url, max_size=2**22, compression=None)
        hello = DeviceHello(device_id=self.device_id, token=TOKEN, open_calls=self.stats.shown)
        await self.ws.send(self.encode(hello))
        return self.ws

    async def run(self) -> None:
        """Read and react; reconnect after a drop; end when :meth:`final` closes the connection."""
        try:
            await self._read()
        except Exception as exc:  # reported as a broken invariant, not a lost task
            self.stats.problems.append(f"{self.device_id}: {type(exc).__name__}: {exc}")

    async def _read(self) -> None:
        ws = await self.connect()
        while True:
            try:
                await self.on_message(codec.decode(await ws.recv()).payload)
            except ConnectionClosed:
                if not self.dropping:  # closed by final(), or by the agent
                    if not self.quiet:
                        problem = f"the agent closed the connection ({ws.close_reason})"
                        self.stats.problems.append(f"{self.device_id}: {problem}")
                    return
                if self.quiet:  # final() began during this drop: it reconnects once itself
                    self.dropping = False
                    self.settled.set()
                    return
                self.stats.counts["reconnects"] += 1
                await asyncio.sleep(self.rng.uniform(0, self.args.max_delay))
                ws = await self.connect()
                self.dropping = False
                self.settled.set()

    async def drop(self, ws: ClientConnection) -> None:
        """Drop the connection ``ws`` now (planned answers are forgotten; the cards stay shown)."""
        if ws is not self.ws or self.dropping:
            return
        for task in list(self.answering.values()):
            if task is not asyncio.current_task():
                task.cancel()
        self.answering.clear()
        self.dropping = True
        self.settled.clear()
        await ws.close()

    async def on_message(self, payload: Any) -> None:
        stats = self.stats
        if isinstance(payload, ToolCall):
            call_id = payload.call_id
            if call_id in stats.cards:
                stats.counts["re-deliveries"] += 1
            stats.cards.add(call_id)
            if call_id in stats.closed or call_id in stats.answered or call_id in self.answering:
                return  # already answered (its close is on its way) or already planned
            ws = self.ws
            assert ws is not None
            await ws.send(self.encode(ToolAck(call_id=call_id, stage="waiting_user")))
            if not self.quiet and self.rng.random() < self.args.p_disconnect:
                await self.drop(ws)  # before answering: the agent re-sends the call on reconnect
                return
            self.plan(payload)
        elif isinstance(payload, ToolCancel):
            stats.closed.setdefault(payload.call_id, payload.reason)
            task = self.answering.get(payload.call_id)
            if task is not None and payload.call_id not in self.late:
                self.answering.pop(payload.call_id)
                task.cancel()
        elif isinstance(payload, Error):
            stats.counts[f"error {payload.code}"] += 1
            if payload.code != "call_closed":
                stats.problems.append(f"{self.device_id}: unexpected error {payload.code}: {payload.message}")

    def plan(self, call: ToolCall) -> None:
        """Plan this card's answer: later, never, or just after its deadline (crossing the expiry)."""
        roll = self.rng.random()
        if roll < self.args.p_ignore:
            self.stats.counts["ignored"] += 1
            return
        if roll < self.args.p_ignore + self.args.p_late and call.expires_at is not None:
            self.late.add(call.call_id)
            delay = parse_timestamp(call.expires_at) - time.time() + 0.05
        else:
            delay = self.rng.uniform(0, self.args.max_delay)
        self.answering[call.call_id] = asyncio.create_task(self.answer(call, max(0.0, delay)))

    async def answer(self, call: ToolCall, delay: float) -> None:
        await asyncio.sleep(delay)
        self.answering.pop(call.call_id, None)
        ws = self.ws
        if ws is None or self.dropping:
            return
        index = self.rng.randrange(len(OPTIONS))
        status = "rejected" if self.rng.random() < 0.1 else "completed"
        result = {"selected": OPTIONS[index], "index": index}
        text = self.encode(ToolResult.model_validate({"call_id": call.call_id, "status": status, "result": result}))
        try:
            await ws.send(text)
        except ConnectionClosed:  # dropped meanwhile: never sent, so the re-sent card is answered again
            self.stats.counts["answers cut by a drop"] += 1
            return
        self.stats.answered[call.call_id] = (status, result)
        with contextlib.suppress(ConnectionClosed):
            if self.rng.random() < self.args.p_duplicate:
                await ws.send(text)  # the same envelope again (a resend): applied once
                self.stats.counts["identical resends"] += 1
                self.stats.resent[call.call_id] += 1
            if self.rng.random() < self.args.p_duplicate:
                other = (index + 1) % len(OPTIONS)
                second = ToolResult(call_id=call.call_id, result={"selected": OPTIONS[other], "index": other})
                await ws.send(self.encode(second))  # a different second answer: refused
                self.stats.second_answers[call.call_id] += 1
            if not self.quiet and self.rng.random() < self.args.p_disconnect:
                self.stats.counts["drops right after an answer"] += 1
                await self.drop(ws)  # the answer is on the wire: it must still count

    async def final(self) -> None:
        """Stop misbehaving, let planned answers go out, then reconnect once so every card is closed."""
        self.quiet = True
        await self.settled.wait()  # a reconnect under way finishes first
        pending = [task for task in self.answering.values() if not task.done()]
        if pending:
            await asyncio.wait(pending)
        assert self.ws is not None
        await self.ws.close()
        if self.reader is not None:
            await self.reader
        self.stats.counts["final reconnects"] += 1
        ws = await self.connect()
        try:
            async with asyncio.timeout(10):
                while self.stats.shown:
                    payload = codec.decode(await ws.recv()).payload
                    if isinstance(payload, ToolCancel) and payload.call_id not in self.stats.closed:
                        self.stats.counts["closed on reconnect"] += 1
                    await self.on_message(payload)
        except TimeoutError:
            self.stats.problems.append(f"{self.device_id}: cards never closed: {self.stats.shown[:5]}")
        await ws.close()


# ------------------------------------------------------------------------------------- the driver


def check(apps: list[App], report: dict[str, Any]) -> list[str]:
    """Every invariant the run must keep; returns what broke."""
    problems: list[str] = list(report["violations"])
    calls: dict[str, dict[str, Any]] = report["calls"]
    expected = sum(app.args.calls for app in apps)
    if len(calls) != expected:
        problems.append(f"{len(calls)} calls reported, {expected} made")
    # a copy of an answer that ended its call meets the ended call (the same answer: silent); a copy
    # of one that was refused is dropped by its envelope id
    to_drop = 0
    terminal = {str(state) for state in TERMINAL}
    for app in apps:
        stats = app.stats
        problems += stats.problems
        mine = {call_id for call_id, call in calls.items() if call["app"] == app.index}
        if stats.cards - mine:
            problems.append(f"{app.device_id}: shown calls its agent never made: {sorted(stats.cards - mine)[:3]}")
        for call_id in mine:
            call = calls[call_id]
            if call["status"] not in terminal:
                problems.append(f"{call_id}: ended as {call['status']!r}")
            first = stats.answered.get(call_id)
            applied = first is not None and (call["status"], call["result"]) == first
            if call["status"] in ("completed", "rejected") and not applied:
                problems.append(f"{call_id}: {call['status']} {call['result']} is not the App's first answer {first}")
            to_drop += 0 if applied else stats.resent[call_id]
            refusals = stats.second_answers[call_id] + (first is not None and not applied)
            if call["refused"] != refusals:
                problems.append(
                    f"{call_id}: {call['refused']} answers refused, {refusals} expected (one lost or doubled)"
                )
    if report["audit"].get("duplicate.envelope", 0) != to_drop:
        dropped = report["audit"].get("duplicate.envelope", 0)
        problems.append(f"{to_drop} copies of refused answers sent, {dropped} dropped by their envelope id")
    return problems


def summarize(args: argparse.Namespace, apps: list[App], report: dict[str, Any], wall: float) -> list[str]:
    """The counts, as printed."""
    calls = report["calls"].values()
    statuses = Counter(call["status"] for call in calls)
    counts: Counter[str] = Counter()
    for app in apps:
        counts.update(app.stats.counts)
    seconds = sum(sum(app.stats.second_answers.values()) for app in apps)
    refused = sum(call["refused"] for call in calls)
    dropped = report["audit"].get("duplicate.envelope", 0)
    interrupted = sum(1 for call in calls if call["interrupted"])
    won = sum(1 for call in calls if call["interrupted"] and call["status"] != "cancelled")
    order = ("completed", "rejected", "expired", "cancelled", "failed", "unsupported")
    return [
        f"lineup load: {args.apps} Apps x {args.calls} calls ({args.concurrency} at a time), seed {args.seed}, "
        f"store {args.store} (fsync {args.fsync}), deadline {args.deadline:g} s",
        f"calls: {sum(statuses.values())}  " + "  ".join(f"{s}: {statuses.get(s, 0)}" for s in order),
        f"interrupted by the agent: {interrupted} (the answer won the race: {won}); "
        f"left unanswered: {counts['ignored']}",
        f"duplicates refused: {dropped + refused} (copies of a refused answer dropped: {dropped}; second answers "
        f"refused: {seconds}; answers refused after an expiry or cancel: {refused - seconds}); identical resends: "
        f"{counts['identical resends']}",
        f"reconnects: {counts['reconnects']} ({counts['drops right after an answer']} right after an answer) "
        f"+ {counts['final reconnects']} final; re-deliveries: {counts['re-deliveries']}; "
        f"cards closed on reconnect: {counts['closed on reconnect']}",
        f"wall time: {wall:.1f} s; agent process CPU: {report.get('cpu_seconds', 0.0):.1f} s",
    ]


async def drive(args: argparse.Namespace, run_dir: Path) -> int:
    started = time.perf_counter()
    rng = random.Random(args.seed)
    log = open(run_dir / "agent.log", "wb")  # noqa: SIM115 - closed below
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).resolve()),
        "--role",
        "agent",
        "--data-dir",
        str(run_dir),
        *forwarded(args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
    )
    assert child.stdin is not None and child.stdout is not None
    apps: list[App] = []
    try:
        async with asyncio.timeout(args.timeout):
            ports = json.loads(await child.stdout.readline())["ports"]
            apps = [App(index, port, args, random.Random(rng.random())) for index, port in enumerate(ports)]
            for app in apps:
                app.reader = asyncio.create_task(app.run())
            line = json.loads(await child.stdout.readline())
            assert line == {"event": "calls-done"}, line
            await asyncio.gather(*(app.final() for app in apps))
            child.stdin.write(b"report\n")
            await child.stdin.drain()
            assert json.loads(await child.stdout.readline()) == {"event": "reported"}
            await child.wait()
    except TimeoutError:
        print(f"lineup load: gave up after {args.timeout:g} s (--timeout)", file=sys.stderr)
        for app in apps:
            print(f"  {app.state()}", file=sys.stderr)
            for problem in app.stats.problems:
                print(f"  {problem}", file=sys.stderr)
        return 1
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        log.close()
        for app in apps:
            if app.reader is not None and not app.reader.done():
                app.reader.cancel()
    report = json.loads((run_dir / "agent-report.json").read_text(encoding="utf-8"))
    wall = time.perf_counter() - started
    for line in summarize(args, apps, report, wall):
        print(line)
    problems = check(apps, report)
    if problems:
        print(f"invariants BROKEN ({len(problems)}):")
        for problem in problems[:20]:
            print(f"  {problem}")
        return 1
    print("invariants: ok (one terminal status per call; none lost; none duplicated; no card left open)")
    return 0


def forwarded(args: argparse.Namespace) -> list[str]:
    """The options the agent process needs."""
    names = ["apps", "calls", "seed", "store", "fsync", "concurrency", "deadline", "max_delay", "p_interrupt", "fault"]
    return [part for name in names for part in (f"--{name.replace('_', '-')}", str(getattr(args, name)))]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--apps", type=int, default=100, help=f"App devices, one agent each (max {MAX_APPS})")
    parser.add_argument("--calls", type=int, default=100, help=f"calls per App (max {MAX_CALLS})")
    parser.add_argument("--concurrency", type=int, default=2, help="calls each agent keeps open at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--fsync", choices=["full", "normal", "off"], default="normal")
    parser.add_argument("--deadline", type=float, default=2.0, help="seconds a call waits before it expires")
    parser.add_argument("--max-delay", type=float, default=0.2, help="longest answer / reconnect / interrupt delay")
    parser.add_argument("--p-ignore", type=float, default=0.03, help="chance an App never answers a card")
    parser.add_argument("--p-late", type=float, default=0.02, help="chance an App answers just after the deadline")
    parser.add_argument("--p-duplicate", type=float, default=0.1, help="chance of a resend, and of a second answer")
    parser.add_argument("--p-disconnect", type=float, default=0.05, help="chance of dropping the connection")
    parser.add_argument("--p-interrupt", type=float, default=0.03, help="chance the agent interrupts a wait")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up (exit 1) after this many seconds")
    parser.add_argument("--data-dir", help="where the stores go (default: a temporary directory, removed)")
    parser.add_argument("--role", choices=["driver", "agent"], default="driver", help=argparse.SUPPRESS)
    parser.add_argument("--fault", choices=["none", "lose-answer"], default="none", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (1 <= args.apps <= MAX_APPS and 1 <= args.calls <= MAX_CALLS and 1 <= args.concurrency <= args.calls):
        parser.error(f"need 1 <= apps <= {MAX_APPS}, 1 <= calls <= {MAX_CALLS}, 1 <= concurrency <= calls")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.role == "agent":
        return asyncio.run(run_agent(args))
    run_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="lineup-load-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(drive(args, run_dir))
    finally:
        if not args.data_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
