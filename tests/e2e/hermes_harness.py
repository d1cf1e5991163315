"""The heavy parts of the Hermes end-to-end tests, meant to be set up once and shared.

- :func:`hermes_session`: a temporary ``HERMES_HOME`` whose ``config.yaml`` enables the
  ``lineup`` plugin (found through its real entry point) with LineUp's settings under
  ``plugins.entries.lineup`` (127.0.0.1, port 0, memory store); the scripted LLM; Hermes'
  ``model_tools`` imported, which runs the real plugin discovery and ``register(ctx)``.
- :func:`running_gateway`: a real Hermes ``GatewayRunner`` on its own thread and event loop,
  as in ``hermes gateway``; the ``lineup`` platform adapter connects and serves the App.
- :func:`hermes_chat`: the real ``hermes chat -q`` command in a fresh process, on the same
  scripted LLM, in a ``HERMES_HOME`` of its own (:func:`cli_home`);
- :func:`ask_then_answer`: the scripted model of a ``hermes`` process that asks one choice.

Only the LLM is fake. The App is :class:`tests.wsapp.WsApp`, a real WebSocket client.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tests.fakes.llm import CONTEXT_LENGTH, MODEL, ScriptedLLM, Turn, call, last_user_text, say, tool_messages

TOKEN = "hermes-e2e-token-0123456789"
#: the options of the choice :func:`ask_then_answer` asks
COLOURS = ["red", "blue", "green"]

CONFIG = """\
model:
  default: {model}
  provider: custom
  base_url: {base_url}
  api_key: scripted
  context_length: {context_length}
  # the scripted model takes images (image_url parts); Hermes would otherwise describe them in text
  supports_vision: true
agent:
  clarify_timeout: 60
  # the Python-toolchain line of the system prompt: pip and python3 subprocesses (about 1 s of every
  # Hermes process's first turn) for a line the scripted model never reads
  environment_probe: false
approvals:
  mode: manual
  timeout: 30
display:
  busy_input_mode: interrupt
# side work that would call the LLM or hold files open behind the tests' back
auxiliary:
  title_generation:
    enabled: false
kanban:
  dispatch_in_gateway: false
plugins:
  enabled: [lineup]
  entries:
    lineup:
      host: 127.0.0.1
      port: 0
      token: {token}
      store: memory
      data_dir: {data_dir}
"""


def within(seconds: float) -> Callable[[Callable[..., Awaitable[None]]], Callable[..., Awaitable[None]]]:
    """A decorator: fail an async test after ``seconds`` rather than hang on an answer that never comes."""

    def bounded(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        @functools.wraps(test)
        async def run(*args: Any, **kwargs: Any) -> None:
            with anyio.fail_after(seconds):
                await test(*args, **kwargs)

        return run

    return bounded


def ask_then_answer(body: dict[str, Any]) -> Turn:
    """A scripted model for ``hermes`` processes: ask the user with a choice named after the prompt,
    then say what the card's result was (so each process's own answer can be checked in its output)."""
    prompt = last_user_text(body)
    results = tool_messages(body)
    if not results:
        return call("choice", question=f"{prompt}?", options=COLOURS)
    answer = results[-1]["json"] or {}
    picked = answer.get("result", {}).get("selected") if answer.get("status") == "completed" else answer.get("status")
    return say(f"{prompt}: {picked}")


def offline_caches(home: Path) -> None:
    """Fresh model-metadata caches, so Hermes never looks the scripted model up on the Internet."""
    entry = {"context_length": CONTEXT_LENGTH, "max_completion_tokens": 4096, "name": MODEL, "pricing": {}}
    (home / "cache").mkdir(exist_ok=True)
    (home / "cache" / "openrouter_model_metadata.json").write_text(json.dumps({MODEL: entry}), encoding="utf-8")
    (home / "models_dev_cache.json").write_text(json.dumps({"custom": {"models": {}}}), encoding="utf-8")


@dataclass
class Hermes:
    """A Hermes installation with LineUp enabled, and the scripted LLM it talks to."""

    home: Path
    llm: ScriptedLLM
    #: the plugin's HermesRuntime in this process (``lineup_plugin.runtime.hermes.install.installed()``)
    runtime: Any
    agents: list[Any] = field(default_factory=list)

    @property
    def service(self) -> Any:
        """The runtime's LineUpService: settings, the server and its lock."""
        return self.runtime.service

    def agent(self, *toolsets: str, attach: bool = True, **options: Any) -> Any:
        """A real ``AIAgent`` on the scripted LLM with ``toolsets`` (default: ``lineup``), attached to LineUp."""
        from run_agent import AIAgent

        agent = AIAgent(
            base_url=self.llm.base_url,
            api_key="scripted",
            provider="custom",
            model=MODEL,
            quiet_mode=True,
            skip_memory=True,
            skip_context_files=True,
            enabled_toolsets=list(toolsets or ("lineup",)),
            **options,
        )
        if attach:
            self.runtime.attach(agent)
        self.agents.append(agent)
        return agent

    @property
    def server(self) -> Any:
        """The running DirectServer (started here if no tool call started it yet)."""
        assert self.service.ensure_started("test")
        return self.service.runner.transport


def run_in_thread(agent: Any, message: str, **options: Any) -> Future[dict[str, Any]]:
    """Run ``agent.run_conversation(message)`` on a worker thread, as a host would; a future of its result."""
    future: Future[dict[str, Any]] = Future()

    def work() -> None:
        try:
            future.set_result(agent.run_conversation(message, **options))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, name="hermes-agent-run", daemon=True).start()
    return future


async def result_of(future: Future[dict[str, Any]]) -> dict[str, Any]:
    """Await a :func:`run_in_thread` future from the test's event loop."""
    return await asyncio.wrap_future(future)


@contextmanager
def hermes_session(home: Path) -> Iterator[Hermes]:
    """Hermes with LineUp enabled in ``home`` (a fresh HERMES_HOME); Hermes is imported here, once."""
    saved = {key: os.environ.get(key) for key in ("HERMES_HOME", "_HERMES_GATEWAY")}
    with ScriptedLLM() as llm:
        (home / "config.yaml").write_text(
            CONFIG.format(
                model=MODEL,
                base_url=llm.base_url,
                context_length=CONTEXT_LENGTH,
                token=TOKEN,
                data_dir=home / "lineup",
            ),
            encoding="utf-8",
        )
        offline_caches(home)
        os.environ["HERMES_HOME"] = str(home)
        import model_tools  # noqa: F401 - runs Hermes' plugin discovery, which calls our register(ctx)

        from lineup_plugin.runtime.hermes.install import installed

        runtime = installed()
        assert runtime is not None, "Hermes did not load the lineup plugin"
        env = Hermes(home, llm, runtime)
        try:
            yield env
        finally:
            for agent in env.agents:
                runtime.detach(agent)
            runtime.service.stop()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@dataclass
class Gateway:
    """A real Hermes gateway running on its own thread and loop, with the ``lineup`` platform."""

    runner: Any
    loop: asyncio.AbstractEventLoop
    adapter: Any

    @property
    def server(self) -> Any:
        """The DirectServer the gateway's LineUp platform serves."""
        return self.adapter.svc.runner.transport

    def settle(self, timeout: float = 60.0) -> None:
        """Block until the gateway finished handling every App message so far (the App session is idle).

        Awaits the platform adapter's message tasks (Hermes keeps them in ``_background_tasks``
        and ``_session_tasks``), so a test's message never lands in the tail of the previous
        test's turn, where Hermes' busy-input rule would treat it as an interruption.
        """

        async def idle() -> None:
            while True:
                tasks = {*self.adapter._background_tasks, *self.adapter._session_tasks.values()}
                pending = [task for task in tasks if not task.done()]
                if not pending:
                    return
                await asyncio.wait(pending)

        asyncio.run_coroutine_threadsafe(idle(), self.loop).result(timeout)

    def tracking(self, chat: str = "app", timeout: float = 60.0) -> None:
        """Block until Hermes tracks the agent of the running turn in the App's ``chat``: its
        ``_running_agents`` slot holds the agent, no longer Hermes' pending sentinel. Only then does Hermes
        interrupt the turn for new text (``busy_input_mode: interrupt``) or stop it for ``/stop``;
        before, it queues the text for after the turn. Hermes fills the slot by polling every
        50 ms once the turn has started, and exposes no event for it: a person never answers a
        card that fast, but a test that sends text as soon as the card comes does.
        """
        from gateway.run import _AGENT_PENDING_SENTINEL

        async def tracked() -> None:
            while True:
                agent = self.runner._running_agents.get(f"agent:main:lineup:dm:{chat}")
                if agent is not None and agent is not _AGENT_PENDING_SENTINEL:
                    return
                await asyncio.sleep(0.01)  # Hermes' own check is a poll too

        asyncio.run_coroutine_threadsafe(tracked(), self.loop).result(timeout)


@contextmanager
def running_gateway(hermes: Hermes) -> Iterator[Gateway]:
    """``GatewayRunner.start()`` as ``hermes gateway`` runs it; stopped (with the LineUp server) at the end."""
    from gateway.config import Platform
    from gateway.run import GatewayRunner

    hermes.service.stop()  # the gateway owns the server from its platform's connect()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="hermes-gateway", daemon=True)
    thread.start()
    runner = GatewayRunner()
    assert asyncio.run_coroutine_threadsafe(runner.start(), loop).result(60)
    adapter = runner.adapters.get(Platform("lineup"))
    assert adapter is not None, f"the gateway did not start the lineup platform: {list(runner.adapters)}"
    try:
        yield Gateway(runner, loop, adapter)
    finally:
        asyncio.run_coroutine_threadsafe(runner.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        os.environ.pop("_HERMES_GATEWAY", None)


def cli_home(hermes: Hermes, home: Path, port: int) -> Path:
    """A fresh ``HERMES_HOME`` for a ``hermes`` command: LineUp on 127.0.0.1:``port``, the session's scripted LLM."""
    home.mkdir(parents=True, exist_ok=True)
    config = CONFIG.format(
        model=MODEL, base_url=hermes.llm.base_url, context_length=CONTEXT_LENGTH, token=TOKEN, data_dir=home / "lineup"
    )
    (home / "config.yaml").write_text(config.replace("port: 0", f"port: {port}"), encoding="utf-8")
    offline_caches(home)
    return home


@contextmanager
def background(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``command`` running in the background with ``env``, its output captured; killed at the end if still running."""
    with subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as running:
        try:
            yield running
        finally:
            if running.poll() is None:
                running.kill()
            running.communicate(timeout=30)


def hermes_chat(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``hermes chat --toolsets lineup <args>`` (the installed command) in ``home``; its output, as text.

    No terminal: stdin is empty and the output is captured.
    """
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))}
    environ.update(HERMES_HOME=str(home), **(env or {}))
    command = [str(Path(sys.executable).with_name("hermes")), "chat", "--toolsets", "lineup", *args]
    return subprocess.run(
        command, env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=True
    )
