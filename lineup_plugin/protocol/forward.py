"""The forwarding protocol: the agent's processes that do not serve the App ask through the one that does.

Sans-I/O, like the session core: the lines are pydantic models, :func:`encode_line` turns one
into bytes and :func:`decode_line` turns bytes back into the line a step of the connection expects
(:data:`SERVER_HELLO`, :data:`SERVER_REQUEST`, :data:`SERVER_DURING_CALL`, :data:`FORWARDER`; one
JSON object per line, at most :data:`MAX_LINE` bytes), and :class:`HandOver` decides, on an
injected clock, when a call whose serving process went away is tried again and when to give up.
The sockets, the token file and the threads are :mod:`lineup_plugin.runtime.forward`'s.

::

    forwarder → server  Hello      {"op": "hello", "token": "…", "pid": 4242}
    forwarder → server  CallLine   {"op": "call", "call_id": "…", "name": "choice", "arguments": {…},
                                    "deadline": 597.5, "origin": {…}, "conversation": {…}}
    forwarder → server  StatusLine {"op": "status", "state": "thinking", "detail": null, "conversation": {…}}
    forwarder → server  TextLine   {"op": "text", "text": "…", "conversation": {…}}
    forwarder → server  CancelLine {"op": "cancel", "call_id": "…", "reason": "…"}   (its run was interrupted)
    forwarder → server  AnswerLine {"op": "answer", "surface": "mcp-host", "result": {…}}
    server → forwarder  ResultLine {"op": "result", "result": {…tool.result payload…}}
    server → forwarder  Interrupt  {"op": "interrupt", "reason": "stopped by the user"}
    server → forwarder  ErrorLine  {"op": "error", "message": "…"}                  (then it closes)

A connection says hello, then one call, status or text; a call's connection then carries the
forwarder's cancels and answers until the server sends its result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, StrictInt

from ..errors import ProtocolError
from .base import WireModel, validate
from .codec import check_storable
from .messages import MAX_REASON as MAX_REASON  # a line's longest reason, detail or error text: the App wire's
from .messages import MAX_TEXT, MAX_TITLE, AgentState, Identifier, Origin, Reason, ToolResult

#: the longest line either side sends (bytes, the newline included)
MAX_LINE = 1_048_576
#: the longest token a hello may carry (``forward.token`` holds 43 characters)
MAX_TOKEN = 256


class ConversationRef(WireModel):
    """Which conversation (agent session) a line belongs to, and its title for the App."""

    id: Identifier
    title: str | None = Field(default=None, max_length=MAX_TITLE)


class Hello(WireModel):
    """The first line of every connection: the token of ``forward.token`` (and the asker's pid, for logs)."""

    op: Literal["hello"] = "hello"
    token: str = Field(max_length=MAX_TOKEN)
    pid: StrictInt | None = None


class CallLine(WireModel):
    """Run this tool call in the serving process and answer its result; the call keeps its id."""

    op: Literal["call"] = "call"
    call_id: Identifier
    name: Identifier
    arguments: dict[str, Any] = Field(default_factory=dict)
    deadline: Annotated[StrictFloat | StrictInt, Field(ge=0)] | None = None
    origin: Origin | None = None
    conversation: ConversationRef | None = None


class StatusLine(WireModel):
    """The asking process's session status, shown on the App (no answer)."""

    op: Literal["status"] = "status"
    state: AgentState
    detail: Reason | None = None
    conversation: ConversationRef | None = None


class TextLine(WireModel):
    """The asking process's session's reply, shown on the App (no answer)."""

    op: Literal["text"] = "text"
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
    conversation: ConversationRef | None = None


class CancelLine(WireModel):
    """The asking process's run was interrupted: cancel its call (``call_id``, if given, must be the
    connection's call; ``reason`` is what the App shows, the agent's "interrupted" when left out)."""

    op: Literal["cancel"] = "cancel"
    call_id: Identifier | None = None
    reason: Reason | None = None


class AnswerLine(WireModel):
    """The asking process answered its own call where it shows the card (an MCP Apps host)."""

    op: Literal["answer"] = "answer"
    surface: Annotated[str, Field(min_length=1, max_length=64)]
    result: ToolResult


class ResultLine(WireModel):
    """The call's terminal result."""

    op: Literal["result"] = "result"
    result: ToolResult


class Interrupt(WireModel):
    """The user pressed stop in the App: interrupt the run too."""

    op: Literal["interrupt"] = "interrupt"
    reason: Reason = ""


class ErrorLine(WireModel):
    """Why the connection is refused; the server closes it next."""

    op: Literal["error"] = "error"
    message: Reason


Line = Hello | CallLine | StatusLine | TextLine | CancelLine | AnswerLine | ResultLine | Interrupt | ErrorLine
_BY_OP: dict[str, type[WireModel]] = {
    "hello": Hello,
    "call": CallLine,
    "status": StatusLine,
    "text": TextLine,
    "cancel": CancelLine,
    "answer": AnswerLine,
    "result": ResultLine,
    "interrupt": Interrupt,
    "error": ErrorLine,
}


def encode_line(line: Line) -> bytes:
    """One line: compact JSON, ASCII only, ``None`` fields left out, ending in a newline."""
    data = line.model_dump(mode="json", exclude_none=True)
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def parse_line(raw: bytes) -> dict[str, Any]:
    """One line as a JSON object; ProtocolError saying why not (also for what the store cannot write:
    a lone surrogate, a number out of range, nesting too deep)."""
    if len(raw) > MAX_LINE:
        raise ProtocolError(f"a line is longer than {MAX_LINE} bytes")
    if not raw.endswith(b"\n"):
        raise ProtocolError("the line was cut off")
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    except RecursionError:  # nested thousands deep: the decoder gives up before check_storable sees it
        raise ProtocolError("not JSON LineUp takes: nested too deep") from None
    check_storable(obj)
    if not isinstance(obj, dict):
        raise ProtocolError("not a JSON object")
    return obj


def decode_line(raw: bytes, expected: tuple[str, ...], refusal: str) -> Line:
    """The line in ``raw``, one of the ``expected`` ops; ProtocolError naming the bad field, or
    ``refusal`` when it is another op."""
    obj = parse_line(raw)
    op = obj.get("op")
    if not isinstance(op, str) or op not in expected:
        raise ProtocolError(refusal)
    line: Line = validate(_BY_OP[op], obj)
    return line


#: what each side reads at each step of a connection, and what it says when a line is another op
SERVER_HELLO = (("hello",), "say hello with the token first")
SERVER_REQUEST = (("call", "status", "text"), "expected a call, a status or a text")
SERVER_DURING_CALL = (("cancel", "answer"), "expected a cancel or an answer")
FORWARDER = (("result", "interrupt", "error"), "expected a result, an interrupt or an error")


class HandOver:
    """When a forwarded call whose serving process could not be reached is tried again, and when to give up.

    On ``clock`` (seconds, monotonic): the first failure starts the patience (``patience``
    seconds); each failure waits :meth:`backoff` longer (0.05 s doubling, at most 1 s) before the
    next try; the call gives up once the patience or its own deadline (``ends``) is over. A
    process that tried again after a failure and then serves itself took the call over
    (:attr:`took_over`): its App is on its way back.
    """

    def __init__(self, clock: Callable[[], float], *, ends: float, patience: float) -> None:
        self.clock = clock
        self.ends = ends
        self.patience = patience
        #: when the serving process was first found unreachable (None: never)
        self.unreachable_since: float | None = None
        self.attempts = 0

    @property
    def took_over(self) -> bool:
        """Whether the serving process went away at least once during this call."""
        return self.unreachable_since is not None

    def left(self) -> float:
        """Seconds left before the call's deadline (never below 0)."""
        return max(0.0, self.ends - self.clock())

    def failed(self) -> float | None:
        """The serving process could not be reached: when to try again (by the clock), or None to give up."""
        now = self.clock()
        if self.unreachable_since is None:
            self.unreachable_since = now
        if now >= self.ends or now - self.unreachable_since > self.patience:
            return None
        retry_at = now + backoff(self.attempts)
        self.attempts += 1
        return retry_at


def backoff(attempt: int) -> float:
    """Seconds to wait before trying again after ``attempt`` failed tries (0.05 s doubling, at most 1 s)."""
    return float(min(1.0, 0.05 * 2 ** min(attempt, 5)))
