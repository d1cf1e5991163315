"""The fault rig's driver: Apps behind fault proxies, agent generations killed and restarted, invariants.

:func:`run_rig` starts the agent (``tests/rig/agent.py``) on a data directory, puts a
:class:`~tests.rig.proxy.FaultProxy` in front of each App's server, runs the Apps through them,
and plays ``generations``: each may SIGKILL the agent at a named point and/or fail its store; a
killed agent is started again on the same directory (the proxies are pointed at its new ports) and
its caller goes on with the calls it had not started. When every call has returned, each App
connects once more directly with every card it ever saw as ``open_calls`` and is told how each
ended. Then :func:`check` holds the caller, the store and the Apps against each other:

- every call the agent started ends exactly once (one terminal audit record, one result for the
  caller), with the same terminal status for the caller, in the store and on the App;
- a completed call carries the App's own answer; nothing is left pending;
- **lost**: a call the caller, the store or an App knows that did not end, or ended unseen by one
  that should know; **duplicated**: a call ended twice, or its caller got two results;
  **unborn**: the agent died between the caller asking and the first commit (nothing was written
  or sent, so there is nothing to end); **failed unrecorded**: the store failed on a new call and
  on its failure too (a disk that stays full): the caller got ``failed`` (``store_failed``) and
  no App had the card — both counted, not violations.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import TERMINAL
from lineup_plugin.protocol.messages import Actor, DeviceHello, Payload, ToolAck, ToolCancel, ToolList, ToolResult

from .agent import OPTIONS, TOKEN
from .proxy import FaultPlan, FaultProxy

ROOT = Path(__file__).resolve().parents[2]
ENDED = re.compile(r"this call already ended \((\w+)\)")


@dataclass
class Generation:
    """One life of the agent: where it is killed (``POINT@N``) and how its store fails (``KIND@N[+M]``)."""

    kill: str | None = None
    store_fault: str | None = None


class RigApp:
    """One App device behind a fault proxy: answers most cards, cancels some, ignores some (they expire)."""

    def __init__(self, index: int, proxy: FaultProxy) -> None:
        self.index = index
        self.device_id = f"app-{index}"
        self.proxy = proxy
        self.seen: set[str] = set()
        self.closed: set[str] = set()
        self.sent: dict[str, str] = {}  # call_id -> the wire text of its answer (resent on redelivery)
        self.answers: dict[str, tuple[str, dict[str, Any]]] = {}
        self.final: dict[str, str] = {}
        self.reconnects = 0
        self.errors = Counter[str]()
        self.task: asyncio.Task[None] | None = None

    def encode(self, payload: Payload, *, id: str | None = None) -> str:
        message = codec.envelope(
            payload,
            sender=Actor(kind="device", id=self.device_id),
            target=Actor(kind="agent", id="lineup-agent"),
            conversation_id=f"conv-{self.index}",
            id=id,
        )
        return codec.encode(message)

    def decide(self, call_id: str) -> str | None:
        """What this App does with a card (fixed per call): answer, cancel or nothing."""
        roll = hashlib.sha256(call_id.encode()).digest()[0] / 256
        if roll < 0.85:
            option = int(roll * 1000) % 2
            answer = {"selected": OPTIONS[option], "index": option}
            self.answers[call_id] = ("completed", answer)
            return self.encode(ToolResult(call_id=call_id, status="completed", result=answer))
        if roll < 0.92:
            self.answers[call_id] = ("cancelled", {})
            return self.encode(ToolCancel(call_id=call_id, reason="not now"))
        return None

    async def hello(self, ws: ClientConnection, open_calls: list[str]) -> None:
        await ws.send(self.encode(DeviceHello(device_id=self.device_id, token=TOKEN, open_calls=open_calls)))

    async def run(self) -> None:
        """Connect through the proxy, answer, reconnect with the cards still shown whenever cut off."""
        while True:
            try:
                async with connect(
                    f"ws://127.0.0.1:{self.proxy.port}/ws", compression=None, open_timeout=5, close_timeout=1
                ) as ws:
                    await self.hello(ws, sorted(self.seen - self.closed))
                    async for data in ws:
                        await self.on_message(ws, data)
            except (OSError, WebSocketException, TimeoutError):
                pass
            self.reconnects += 1
            await asyncio.sleep(0.02)  # back off before reconnecting (the agent may be restarting)

    async def on_message(self, ws: ClientConnection, data: str | bytes) -> None:
        message = codec.decode(data)
        payload = message.payload
        if message.kind == "tool.call":
            call_id = payload.call_id  # type: ignore[union-attr]
            self.seen.add(call_id)
            if call_id not in self.sent:
                text = self.decide(call_id)
                self.sent[call_id] = text or ""
            if self.sent[call_id]:
                await ws.send(self.encode(ToolAck(call_id=call_id, stage="waiting_user")))
                await ws.send(self.sent[call_id])  # the same envelope again on redelivery: deduplicated
        elif message.kind == "tool.cancel":
            self.closed.add(payload.call_id)  # type: ignore[union-attr]
        elif message.kind == "error":
            self.errors[payload.code] += 1  # type: ignore[union-attr]

    async def final_check(self, port: int) -> None:
        """Connect directly, with every card ever seen open, and learn how each ended."""
        async with connect(f"ws://127.0.0.1:{port}/ws", compression=None) as ws:
            await self.hello(ws, sorted(self.seen))
            await ws.send(self.encode(ToolList(request=True)))
            lists = 0
            async for data in ws:  # in order: welcome, its tool list, ..., the cancels, the tool list asked for
                message = codec.decode(data)
                if message.kind == "tool.cancel":
                    found = ENDED.match(message.payload.reason or "")  # type: ignore[union-attr]
                    if found:
                        self.final[message.payload.call_id] = found.group(1)  # type: ignore[union-attr]
                elif message.kind == "tool.list":
                    lists += 1
                    if lists == 2:
                        return


@dataclass
class RigReport:
    """What the rig did and found."""

    faults: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    duplicated: int = 0
    disagree: int = 0
    unborn: int = 0
    unrecorded: int = 0
    killed_at: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    points: dict[str, int] = field(default_factory=dict)
    max_rss_kib: int = 0
    reconnects: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.disagree or self.problems)

    def table(self) -> str:
        faults = ", ".join(f"{name} {count}" for name, count in sorted(self.faults.items())) or "none"
        statuses = ", ".join(f"{name} {count}" for name, count in sorted(self.statuses.items()))
        rows = [
            ("faults injected", f"{sum(self.faults.values())} ({faults})"),
            ("calls", f"{self.calls} ({statuses}; unborn {self.unborn}, failed unrecorded {self.unrecorded})"),
            ("lost", str(self.lost)),
            ("duplicated", str(self.duplicated)),
            ("disagreeing (caller / store / App)", str(self.disagree)),
            ("App reconnects", str(self.reconnects)),
            ("agent peak RSS", f"{self.max_rss_kib / 1024:.0f} MiB"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = ["| " + "what".ljust(width) + " | count |", "|" + "-" * (width + 2) + "|-------|"]
        lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
        return "\n".join(lines)


class _Agent:
    """One generation of the agent process."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stalled = False

    async def line(self, stall: float) -> dict[str, Any] | None:
        """The next line; None once the process is gone. An agent silent for ``stall`` seconds is
        stuck (a call nobody will end): that is a failure, the process is killed and it is reported."""
        assert self.process.stdout is not None
        try:
            raw = await asyncio.wait_for(self.process.stdout.readline(), stall)
        except TimeoutError:
            self.stalled = True
            self.process.kill()
            return None
        return json.loads(raw) if raw else None


async def run_rig(
    data_dir: Path,
    *,
    apps: int,
    calls: int,
    generations: list[Generation],
    plan: FaultPlan,
    concurrency: int = 2,
    deadline: float = 2.0,
    p_interrupt: float = 0.05,
    seed: int = 1,
    stall: float = 60.0,
) -> RigReport:
    """Run the rig (see the module docstring) and return its report, invariants checked."""
    data_dir.mkdir(parents=True, exist_ok=True)
    report = RigReport()
    proxies = [FaultProxy(0, plan) for _ in range(apps)]
    for proxy in proxies:
        await proxy.start()
    rig_apps = [RigApp(index, proxy) for index, proxy in enumerate(proxies)]
    started: dict[str, int] = {}
    results: dict[str, list[tuple[str, Any]]] = {}
    skip = data_dir / "skip.json"
    queue = list(generations)
    final: dict[str, Any] | None = None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        while final is None:
            generation = queue.pop(0) if queue else Generation()
            skip.write_text(json.dumps(sorted(started)))
            options = ["--kill", generation.kill] if generation.kill else []
            options += ["--store-fault", generation.store_fault] if generation.store_fault else []
            with open(data_dir / "agent.log", "ab") as log:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "tests.rig.agent",
                    "--data-dir",
                    str(data_dir),
                    "--apps",
                    str(apps),
                    "--calls",
                    str(calls),
                    "--concurrency",
                    str(concurrency),
                    "--deadline",
                    str(deadline),
                    "--p-interrupt",
                    str(p_interrupt),
                    "--seed",
                    str(seed + len(generations) - len(queue)),
                    "--skip",
                    str(skip),
                    *options,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log,
                    env=env,
                    cwd=ROOT,
                    limit=2**24,
                )
            agent = _Agent(process)
            try:
                first = await agent.line(stall)
                ports: list[int] = first["ports"] if first else []
                for proxy, port in zip(proxies, ports, strict=False):
                    proxy.target = port
                for app in rig_apps:
                    if app.task is None and ports:
                        app.task = asyncio.create_task(app.run())
                while first is not None and (line := await agent.line(stall)) is not None:
                    if "started" in line:
                        started[line["started"]] = line["app"]
                    elif "ended" in line:
                        results.setdefault(line["ended"], []).append((line["status"], line["result"]))
                    elif line.get("event") == "calls-done":
                        for app in rig_apps:
                            if app.task is not None:
                                app.task.cancel()
                                with contextlib.suppress(asyncio.CancelledError):
                                    await app.task
                                app.task = None
                        try:
                            await asyncio.gather(
                                *(app.final_check(port) for app, port in zip(rig_apps, ports, strict=True))
                            )
                        except (OSError, WebSocketException):
                            continue  # killed at a point the final reconnects pass: the next life checks
                        assert process.stdin is not None
                        process.stdin.write(b"report\n")
                        await process.stdin.drain()
                    elif "report" in line:
                        final = line["report"]
            finally:
                if process.returncode is None and final is not None:
                    await process.wait()
                elif process.returncode is None:
                    code = await process.wait()
                    if code != -signal.SIGKILL:
                        report.problems.append(f"the agent exited with {code} (see {data_dir / 'agent.log'})")
                        return report
            rc = await process.wait()
            for proxy in proxies:  # its ports may go to another App's server in the next life
                proxy.target = 0
            if agent.stalled:
                report.problems.append(f"the agent stalled: silent for {stall} s (calls never ended)")
                return report
            if final is None:
                if rc != -signal.SIGKILL:
                    report.problems.append(f"the agent exited with {rc} (see {data_dir / 'agent.log'})")
                    return report
                report.faults["kill -9"] += 1
                report.killed_at.append(generation.kill or "?")
            if generation.store_fault:
                report.faults[f"store {generation.store_fault.partition('@')[0]}"] += 1
    finally:
        for app in rig_apps:
            if app.task is not None and not app.task.done():
                app.task.cancel()
        for proxy in proxies:
            await proxy.close()
    report.faults.update({f"net {name}": count for name, count in plan.counts.items()})
    check(report, final, started, results, rig_apps)
    return report


def check(
    report: RigReport,
    final: dict[str, Any],
    started: dict[str, int],
    results: dict[str, list[tuple[str, Any]]],
    apps: list[RigApp],
) -> None:
    """Hold the caller, the store and every App against each other (see the module docstring)."""
    report.points = final["points"]
    report.max_rss_kib = final["max_rss_kib"]
    terminal = {str(state) for state in TERMINAL}
    for app in apps:
        report.reconnects += app.reconnects
        report.errors.update(app.errors)
        stored: dict[str, Any] = final["apps"][str(app.index)]["calls"]
        pending = final["apps"][str(app.index)]["pending"]
        if pending:
            report.lost += len(pending)
            report.problems.append(f"app {app.index}: still pending {pending}")
        known = {c for c, index in started.items() if index == app.index} | stored.keys() | app.seen
        for call_id in sorted(known):
            report.calls += 1
            row = stored.get(call_id)
            mine = results.get(call_id, [])
            if row is None:
                failed_unsaved = [status for status, result in mine] == ["failed"] and mine[0][1].get(
                    "error"
                ) == "store_failed"
                if failed_unsaved and call_id not in app.seen:
                    report.unrecorded += 1  # the disk stayed full through its failure too: told, not written
                elif mine or call_id in app.seen:
                    report.lost += 1
                    seen = "saw" if call_id in app.seen else "never saw"
                    report.problems.append(f"{call_id}: the store does not know it (caller {mine}, the App {seen} it)")
                else:
                    report.unborn += 1
                continue
            state = row["state"]
            report.statuses[state] += 1
            if state not in terminal or row["ends"] == 0:
                report.lost += 1
                report.problems.append(f"{call_id}: {state}, {row['ends']} terminal records")
                continue
            if row["ends"] > 1 or len(mine) > 1:
                report.duplicated += 1
                report.problems.append(f"{call_id}: {row['ends']} terminal records, caller got {mine}")
            if mine and mine[0][0] != state:
                report.disagree += 1
                report.problems.append(f"{call_id}: the caller got {mine[0][0]}, the store has {state}")
            if call_id in app.seen and app.final.get(call_id) != state:
                if call_id not in app.final:
                    report.lost += 1
                else:
                    report.disagree += 1
                report.problems.append(f"{call_id}: the App was told {app.final.get(call_id)}, the store has {state}")
            if state == "completed" and app.answers.get(call_id, (None, None))[1] != row["result"]:
                report.disagree += 1
                report.problems.append(
                    f"{call_id}: completed with {row['result']}, the App answered {app.answers.get(call_id)}"
                )
