"""A scripted OpenAI-compatible chat-completions server for driving a real agent in tests.

Only the LLM is fake: the agent (e.g. Hermes' ``AIAgent``) talks to it over real HTTP on
127.0.0.1, port 0. Each *main* request (one that offers tools) takes the next scripted
:class:`Turn` and gets it back as a streamed (SSE) or plain chat completion; every request is
recorded so a test can assert what the agent sent next (e.g. the structured tool result).

Requests without tools (title generation, summaries and other side calls an agent makes) are
answered with a short text and recorded, but do not consume the script.

A turn may be a callable taking the request body, so a test can build the reply from what the
agent sent. A streamed turn (:func:`stream`) sends its text in pieces, one SSE chunk each, and
may hold between pieces until the test sets a :class:`threading.Event` (:class:`Gate`), so a test
can look at what the agent shows of a reply half written — and interrupt it there.

When the script is exhausted the server answers "(script exhausted)" and records
the overrun in :attr:`ScriptedLLM.errors`.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "scripted-model"
#: what the fake reports as the model's context window (saves the agent a metadata lookup)
CONTEXT_LENGTH = 128_000


#: how long a streamed turn waits at a gate before it gives up and ends the stream cut short
GATE_TIMEOUT = 60.0


class Gate(threading.Event):
    """A point in a streamed turn where the server waits until the test calls :meth:`set`.

    :attr:`reached` is set when the server got there (every piece before it was written).
    """

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()


@dataclass
class Turn:
    """One scripted assistant turn: some text, or tool calls, or both.

    ``pieces``, when given, are how the text is streamed: each string is one SSE chunk, and a
    :class:`Gate` holds the stream until it is set.
    """

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    pieces: list[str | Gate] = field(default_factory=list)


def say(text: str) -> Turn:
    """A turn that answers with ``text``."""
    return Turn(text=text)


def stream(*pieces: str | Gate) -> Turn:
    """A turn that streams its text in ``pieces`` (strings, one chunk each; a Gate waits for the test)."""
    return Turn(text="".join(piece for piece in pieces if isinstance(piece, str)), pieces=list(pieces))


def call(name: str, **arguments: Any) -> Turn:
    """A turn that calls tool ``name`` with ``arguments``."""
    return Turn(tool_calls=[(name, arguments)])


Script = Turn | Callable[[dict[str, Any]], Turn]


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``role: tool`` messages of a recorded request, each with ``content`` parsed as JSON if it is."""
    out = []
    for message in body.get("messages", []):
        if message.get("role") != "tool":
            continue
        item = dict(message)
        content = item.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        try:
            item["json"] = json.loads(content) if isinstance(content, str) else None
        except ValueError:
            item["json"] = None
        out.append(item)
    return out


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last ``role: user`` message of a recorded request."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content)
    return ""


def tool_names(body: dict[str, Any]) -> set[str]:
    """The names of the tools a recorded request offered the model."""
    return {t.get("function", {}).get("name", "") for t in body.get("tools", []) or []}


class ScriptedLLM:
    """The server. Use as a context manager; ``base_url`` is ready once entered."""

    def __init__(self, script: Iterable[Script] = ()) -> None:
        self._script: list[Script] = list(script)
        self._cond = threading.Condition()
        self.requests: list[dict[str, Any]] = []
        self.side_requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ script

    def push(self, *turns: Script) -> None:
        """Append turns to the script."""
        with self._cond:
            self._script.extend(turns)

    def reset(self, *turns: Script) -> None:
        """Forget recorded requests and errors and start a new script."""
        with self._cond:
            self._script = list(turns)
            self.requests.clear()
            self.side_requests.clear()
            self.errors.clear()

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Block until ``count`` main requests were received; returns them all."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"expected {count} llm requests, got {len(self.requests)}")
            return list(self.requests)

    def _next_turn(self, body: dict[str, Any]) -> Turn:
        with self._cond:
            self.requests.append(body)
            self._cond.notify_all()
            if not self._script:
                self.errors.append(f"script exhausted at request {len(self.requests)}")
                return say("(script exhausted)")
            item = self._script.pop(0)
        return item(body) if callable(item) else item

    # ------------------------------------------------------------------ server

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. ``http://127.0.0.1:41234/v1``."""
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ScriptedLLM:
        """Start serving on 127.0.0.1, port 0, on a daemon thread."""
        llm = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    model = {"id": MODEL, "object": "model", "context_length": CONTEXT_LENGTH}
                    self._json(200, {"object": "list", "data": [model]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if body.get("tools"):
                    turn = llm._next_turn(body)
                else:
                    with llm._cond:
                        llm.side_requests.append(body)
                    turn = say("ok")
                if body.get("stream"):
                    self._stream(turn)
                else:
                    self._json(200, llm._completion(turn))

            def _stream(self, turn: Turn) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for chunk in llm._chunks(turn):
                        if isinstance(chunk, Gate):
                            chunk.reached.set()
                            if not chunk.wait(GATE_TIMEOUT):
                                return  # cut short: no finish chunk, no [DONE]
                            continue
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the agent hung up (it was interrupted)
                    return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- payloads

    def _tool_calls(self, turn: Turn) -> list[dict[str, Any]]:
        return [
            {
                "id": f"call_{next(self._ids)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
            }
            for name, arguments in turn.tool_calls
        ]

    def _completion(self, turn: Turn) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.tool_calls:
            message["tool_calls"] = self._tool_calls(turn)
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    def _chunks(self, turn: Turn) -> list[dict[str, Any] | Gate]:
        cid = f"chatcmpl-{next(self._ids)}"

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }

        chunks: list[dict[str, Any] | Gate] = [chunk({"role": "assistant", "content": ""})]
        for piece in turn.pieces or ([turn.text] if turn.text else []):
            chunks.append(piece if isinstance(piece, Gate) else chunk({"content": piece}))
        for index, tool_call in enumerate(self._tool_calls(turn)):
            chunks.append(chunk({"tool_calls": [{"index": index, **tool_call}]}))
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        chunks.append(chunk({}, "tool_calls" if turn.tool_calls else "stop", usage=usage))
        return chunks
