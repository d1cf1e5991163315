"""The demo: a scripted agent (no LLM, no API key) that uses every built-in tool through the App.

``lineup demo`` starts the direct server, prints the App's link and, once an App is connected,
plays a script: a greeting, ``choice``, ``confirm`` (with a risk), ``input`` (a small form),
``calculator`` (add) and ``canvas`` (open, draw, draw, undo, close). Each result is printed to
the terminal and answered with a text message in the App. Typing ``again`` in the App starts
the script over (a card still open is cancelled); the stop button ends the current run.

The demo serves like any LineUp process: it holds the data directory's server lock (a second
demo there is refused, naming the first) and opens the forwarding socket, so ``lineup mcp`` or a
Hermes process on the same data directory asks through the demo's App.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from importlib.resources.abc import Traversable
from types import TracebackType
from typing import Any

from .config.settings import Settings
from .errors import StoreBusyError
from .hub import Hub
from .protocol.messages import ToolResult
from .qr import terminal_qr
from .runtime.forward import ForwardServer, platform_supported
from .runtime.lock import ServerLock
from .tools.registry import Registry
from .transports.direct.server import DirectServer

AGAIN = "again"

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name"},
        "age": {"type": "integer", "title": "Age", "minimum": 0},
        "newsletter": {"type": "boolean", "title": "Send me the newsletter"},
    },
    "required": ["name"],
}


def describe(name: str, flat_args: dict[str, Any], result: ToolResult) -> str:
    """One terminal line for a finished call, e.g. ``choice → completed {"selected": ...}``."""
    action = flat_args.get("action")
    label = f"{name}.{action}" if action else name
    return f"{label} → {result.status} {json.dumps(result.result, ensure_ascii=False)}"


def _say(line: str) -> None:
    print(line, flush=True)  # at once, also when stdout is a pipe or a log


class Demo:
    """The scripted agent and its direct server. ``async with Demo(settings) as demo: await demo.run()``."""

    def __init__(
        self,
        settings: Settings,
        *,
        registry: Registry | None = None,
        out: Callable[[str], None] | None = None,
        app_dir: Traversable | None = None,
    ) -> None:
        self.out = out or _say
        self.lock = ServerLock(settings.data_dir)
        if not self.lock.acquire("demo"):
            owner = self.lock.owner() or "an unknown process"
            raise StoreBusyError(
                f"another LineUp process already serves {settings.data_dir} ({owner}); "
                "stop it, or give the demo a data directory of its own (--data-dir)"
            )
        try:
            self.hub = Hub.from_settings(settings, registry, on_text=self._on_text, on_stop=self._on_stop)
            self.server = DirectServer.from_settings(self.hub, settings, app_dir=app_dir)
        except BaseException:
            self.lock.release()
            raise
        #: the socket other processes of this data directory forward their calls through
        self.forward = ForwardServer(self.hub, settings.data_dir) if platform_supported() else None
        #: how many times the script ran to its end
        self.finished = 0
        self._again = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Demo:
        try:
            await self.server.start()
            if self.forward is not None:
                await self.forward.__aenter__()
        except BaseException:
            await self.server.close()
            self.hub.store.close()
            self.lock.release()
            raise
        self.out("LineUp demo: a scripted agent (no LLM) that uses every built-in tool.")
        self.out("Open this link on your phone or in a browser on the same network:")
        self.out(f"  {self.server.connect_link}")
        self.out(terminal_qr(self.server.connect_link))
        self.out("Type 'again' in the App to replay the script. Ctrl+C stops the demo.")
        self._task = asyncio.create_task(self._loop(), name="lineup-demo")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
        try:
            if self.forward is not None:
                await self.forward.__aexit__(exc_type, exc, tb)
            await self.server.close()
            self.hub.store.close()
        finally:
            self.lock.release()

    async def run(self) -> None:
        """Serve until cancelled (Ctrl+C)."""
        assert self._task is not None, "use Demo as an async context manager"
        await self._task

    # --------------------------------------------------------------------------- the App

    async def _on_text(self, device_id: str, text: str) -> None:
        self.out(f"{device_id} says: {text}")
        if text.strip().lower() == AGAIN:
            self._again.set()
        else:
            where = self.hub.text_conversation  # answered in the conversation it was typed in
            await self.hub.send_text(f"I'm only a script. Type '{AGAIN}' to run it again.", conversation_id=where)

    async def _on_stop(self, device_id: str) -> None:
        self.out(f"{device_id} pressed stop")
        self._stop.set()

    # ---------------------------------------------------------------------------- script

    async def _loop(self) -> None:
        while True:
            self._again.clear()
            self._stop.clear()
            script = asyncio.create_task(self.script())
            again = asyncio.create_task(self._again.wait())
            stop = asyncio.create_task(self._stop.wait())
            try:
                await asyncio.wait([script, again, stop], return_when=asyncio.FIRST_COMPLETED)
                if not script.done():
                    script.cancel()  # the open card is cancelled on every device
                    await asyncio.wait([script])
                    if stop.done():
                        await self.hub.set_status("idle", "stopped")
                        await self.hub.send_text(f"Stopped. Type '{AGAIN}' to start over.")
                        self.out("script stopped")
                        await again
                    self.out("script restarted")
                    continue
                if script.exception() is not None:
                    self.out(f"the script failed: {script.exception()!r}")
                await again
            finally:
                for task in (script, again, stop):
                    task.cancel()

    async def say(self, text: str) -> None:
        """Send an agent reply to the App (and echo it in the terminal)."""
        self.out(f"agent: {text}")
        await self.hub.send_text(text)

    async def ask(self, name: str, flat_args: dict[str, Any]) -> ToolResult:
        """Call a tool once an App is connected and print its result."""
        while True:
            await self.server.wait_for_device()
            await self.hub.set_status("waiting_input", name)
            result = await self.hub.agent_call(name, flat_args)
            if result.status == "failed" and result.result.get("error") == "no_app":
                continue  # the App left between the wait and the call
            await self.hub.set_status("running")
            self.out(describe(name, flat_args, result))
            return result

    async def script(self) -> None:
        """One run of the demo script."""
        await self.server.wait_for_device()
        await self.hub.set_status("running")
        await self.say("Hi! I'm the LineUp demo agent: a script, no AI. Let me show you every built-in tool.")

        choice = await self.ask(
            "choice", {"question": "Where should I deploy?", "options": ["staging", "preview", "production"]}
        )
        if choice.status == "completed":
            await self.say(f"You picked {choice.result.get('selected')}.")
        else:
            await self.say(f"No choice made ({choice.status}).")

        confirm = await self.ask(
            "confirm",
            {
                "message": "Restart the web service now?",
                "details": "systemctl restart web.service",
                "risk": "user_confirmation",
            },
        )
        approved = confirm.status == "completed" and confirm.result.get("approved") is True
        await self.say("Restarting it (pretend)." if approved else f"I won't restart it ({confirm.status}).")

        form = await self.ask("input", {"prompt": "Tell me a little about you", "fields": FORM})
        values = form.result.get("values") if form.status == "completed" else None
        if isinstance(values, dict) and values.get("name"):
            await self.say(f"Nice to meet you, {values['name']}.")
        else:
            await self.say(f"No form this time ({form.status}).")

        total = await self.ask("calculator", {"action": "add", "a": 19, "b": 23})
        if total.status == "completed":
            await self.say(f"Your calculator says 19 + 23 = {total.result.get('value')}.")
        else:
            await self.say(f"The calculator did not answer ({total.status}).")

        await self._canvas()
        await self.say(f"That was every built-in tool. Type '{AGAIN}' to run the script again.")
        await self.hub.set_status("idle")
        self.finished += 1

    async def _canvas(self) -> None:
        await self.say("Now a canvas: I'll draw a roof and a line, then undo the line.")
        opened = await self.ask("canvas", {"action": "open", "width": 320, "height": 240})
        instance = opened.result.get("instance_id")
        if opened.status != "completed" or not isinstance(instance, str):
            await self.say(f"No canvas this time ({opened.status}).")
            return
        steps: list[dict[str, Any]] = [
            {"action": "draw", "path": "M40 200 L160 40 L280 200 Z", "color": "#2b6cb0", "width": 4},
            {"action": "draw", "path": "M100 150 L220 150", "color": "#e53e3e", "width": 4},
            {"action": "undo"},
            {"action": "close"},
        ]
        for step in steps:
            result = await self.ask("canvas", {**step, "instance_id": instance})
            if result.status != "completed":
                await self.say(f"The canvas stopped at {step['action']} ({result.status}).")
                return
        await self.say("Canvas closed.")
