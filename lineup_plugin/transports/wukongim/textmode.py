"""Cards as plain text, for WuKongIM clients that cannot draw them (sans-I/O).

A stock WuKongIM or TangSengDaoDao app shows only WuKongIM's built-in content; a LineUp envelope
(custom content 9527) is an unknown message there. For such a user, :class:`TextMode` stands in
for the App: it reads the agent's envelopes for that user and says what a person should read,
and reads the person's text replies as answers.

* ``choice`` is a numbered list, answered by a number (or the option's text);
* ``confirm`` shows its risk and details, answered "yes" (approved) or "no" (rejected);
* ``input`` asks its fields one at a time, each checked against its JSON Schema as it is
  answered (numbered options for an ``enum``, several numbers for an array of ``enum`` items,
  yes/no for a boolean, JSON for an object or array), then the whole form against ``fields``;
* ``calculator`` is computed and shown, as the App's card does (it never asks the user);
* every other tool (``canvas``, a plugin's or an App's) has no text form: answered
  ``unsupported`` at once, and the user is told.

One card is asked at a time; the others wait in order ("(1 more waiting)"). A reply that does
not fit is answered with what to type (``reply with a number from 1 to 3, or "cancel"``); the
card stays open. "cancel" cancels any card (a confirm is then rejected). While a card waits,
every reply is read as its answer, except a message starting with ``/`` (a command such as
``/stop``), which goes to the agent; with no card open, text goes to the agent as before.
A card withdrawn by the agent, expired, or answered on another device is said so in text.

Nothing here does I/O: :meth:`TextMode.from_agent` takes an encoded envelope the hub sends to
the user, :meth:`TextMode.from_user` a text the user sent, and both return what to do —
:class:`Say` a text to the user, :class:`CardAnswer` a ``tool.result`` to hand to the hub as the
user's device. The hub still checks every answer against the tool's outputSchema; the checks
of each field use the registry's own :class:`~lineup_plugin.tools.registry.SchemaCheck`.

Whether a user gets text is decided per user (:attr:`TextMode.active`): with the setting
``auto``, until their client declares LineUp support by sending a LineUp envelope (the App's
``device.hello``); ``always`` and ``never`` force it.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ...errors import ProtocolError
from ...protocol import codec
from ...protocol.messages import DeviceWelcome, Envelope, Error, Text, ToolCall, ToolCancel, ToolResult
from ...protocol.session import ANSWERED_ELSEWHERE
from ...protocol.tools import HIGH_RISK
from ...tools.registry import SchemaCheck

TextCardsSetting = Literal["auto", "always", "never"]

#: the longest reply read as an answer, in characters (as long as an App's chat message may be)
MAX_REPLY_CHARS = 100_000
#: how much of a reply a re-prompt quotes
QUOTE_CHARS = 40
#: how much of a question a notice about its card quotes
TITLE_CHARS = 80
#: answers sent whose card comes back if the agent refuses them (newest kept)
SENT_KEPT = 64

CANCEL_WORDS = frozenset({"cancel", "/cancel", "取消"})
YES_WORDS = frozenset(
    {"y", "yes", "ok", "okay", "approve", "approved", "sure"}
    | {"是", "是的", "好", "好的", "同意", "确认", "可以", "👍", "✅"}
)
NO_WORDS = frozenset({"n", "no", "nope", "reject", "deny", "否", "不", "不要", "不行", "拒绝", "👎", "❌"})
SKIP_WORDS = frozenset({"skip", "-", "跳过"})

#: how the App labels each risk (lineup_plugin/app/cards/confirm.js)
RISK_LABEL = {
    "display_only": "Low risk",
    "user_confirmation": "Needs your approval",
    "system_permission": "High risk: system permission",
    "restricted": "High risk: restricted action",
}
#: the calculator's actions: symbol and operation (as lineup_plugin/app/cards/calculator.js)
#: how a card names the agent session that asks (as lineup_plugin/app/cards/card.js)
ORIGIN_TEXT = {
    "cli": "CLI",
    "chat": "One-shot chat",
    "gateway": "Gateway chat",
    "cron": "Cron job",
    "subagent": "Subagent",
    "mcp": "MCP client",
    "process": "Agent process",
}
_OPERATIONS: dict[str, tuple[str, Callable[[float, float], float]]] = {
    "add": ("+", lambda a, b: a + b),
    "subtract": ("−", lambda a, b: a - b),
    "multiply": ("×", lambda a, b: a * b),
    "divide": ("÷", lambda a, b: a / b),
}
_SEPARATORS = re.compile(r"[,;/\s、，；]+")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_WHOLE = re.compile(r"[+-]?\d+")
_MAX_NUMBER_CHARS = 100
_CANCELLED_BY_USER = "the user cancelled this in the chat"


# -------------------------------------------------------------------------------- outputs


@dataclass(frozen=True, slots=True)
class Say:
    """Post ``text`` to the user as a plain text message."""

    text: str


@dataclass(frozen=True, slots=True)
class CardAnswer:
    """Hand ``result`` to the hub as the user's answer, as if their device had sent a ``tool.result``."""

    result: ToolResult


Output = Say | CardAnswer


# ------------------------------------------------------------------------------- replies


def normalized(reply: str) -> str:
    """``reply`` as words are compared: NFKC (full-width digits and letters become ASCII), trimmed, casefolded."""
    return unicodedata.normalize("NFKC", reply).strip().casefold()


def quote(reply: str) -> str:
    """A short, printable quotation of ``reply`` for a re-prompt."""
    text = " ".join(reply.split())
    text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate becomes "?"
    return f'"{text[:QUOTE_CHARS]}…"' if len(text) > QUOTE_CHARS else f'"{text}"'


def _cut(text: str, limit: int = TITLE_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _option_number(word: str) -> int | None:
    """The 0-based option a word names by number ("2", "２", "٢", "#2", "2."), if it is a number."""
    word = word.strip().lstrip("#").rstrip(".)）")
    if not word or len(word) > 6 or not word.isdecimal():
        return None
    return int(word) - 1


def _pick(word: str, options: list[str]) -> int | str:
    """The 0-based index of the option ``word`` names (by number, else by its text), or what is wrong."""
    number = _option_number(word)
    if number is not None and 0 <= number < len(options):
        return number
    for index, option in enumerate(options):
        if normalized(option) == word:  # also an option that is a number itself: "20" of [10, 20, 30]
            return index
    if number is not None:
        return f"there is no option {number + 1}"
    return f"{quote(word)} is not one of the options"


def _numbers_hint(count: int) -> str:
    return "1" if count == 1 else f"1 to {count}"


@dataclass(frozen=True, slots=True)
class _Parsed:
    value: Any


@dataclass(frozen=True, slots=True)
class _Unfit:
    problem: str


@dataclass(frozen=True, slots=True)
class _Skipped:
    pass


_Reading = _Parsed | _Unfit | _Skipped
_MISSING: Any = object()

QuestionKind = Literal["text", "number", "integer", "yesno", "one", "many", "json"]


@dataclass
class Question:
    """One question of a card: what to show, and how to read a reply to it."""

    kind: QuestionKind
    title: str = ""
    hint: str = ""
    options: list[Any] = field(default_factory=list)
    required: bool = True
    default: Any = _MISSING
    #: the JSON type of a ``json`` answer ("object" or "array")
    json_type: str = "object"
    #: the field's own schema check (input fields only)
    check: SchemaCheck | None = None
    name: str = ""

    def lines(self) -> list[str]:
        """The options, one numbered line each (none for other kinds)."""
        return [f"{number}. {_show(option)}" for number, option in enumerate(self.options, 1)]

    def instruction(self) -> str:
        """What to reply, e.g. ``Reply with a number from 1 to 3, or "cancel".``"""
        count = len(self.options)
        what = {
            "text": "Reply with your answer",
            "number": "Reply with a number",
            "integer": "Reply with a whole number",
            "yesno": 'Reply "yes" or "no"',
            "one": f"Reply with a number from {_numbers_hint(count)}",
            "many": f'Reply with one or more numbers from {_numbers_hint(count)}, e.g. "1, {min(2, count)}"',
            "json": "Reply with JSON (an object)" if self.json_type == "object" else "Reply with JSON (an array)",
        }[self.kind]
        if not self.required or self.default is not _MISSING:
            keep = f"keep {_show(self.default)}" if self.default is not _MISSING else "leave it empty"
            return f'{what}, "skip" to {keep}, or "cancel".'
        return f'{what}, or "cancel".'

    def read(self, reply: str) -> _Reading:
        """Read ``reply`` (not a cancel word): the value, a skip, or what is wrong with it."""
        word = normalized(reply)
        if word in SKIP_WORDS and self.kind not in ("text", "json"):
            return self._skip()
        if self.kind == "text":
            text = reply.strip()
            if text == "" or normalized(text) in SKIP_WORDS:
                return self._skip()
            return _Parsed(text)
        if self.kind in ("number", "integer"):
            return _read_number(word, integer=self.kind == "integer")
        if self.kind == "yesno":
            if word in YES_WORDS:
                return _Parsed(True)
            if word in NO_WORDS:
                return _Parsed(False)
            return _Unfit(f'{quote(reply)} is neither "yes" nor "no".')
        if self.kind == "one":
            picked = _pick(word, [str(option) for option in self.options])
            return _Parsed(picked) if isinstance(picked, int) else _Unfit(picked[:1].upper() + picked[1:] + ".")
        if self.kind == "many":
            return self._read_many(word)
        if word in SKIP_WORDS:
            return self._skip()
        try:
            value = json.loads(reply, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            return _Unfit("That is not valid JSON.")
        return _Parsed(value)

    def _skip(self) -> _Reading:
        if self.default is not _MISSING:
            return _Parsed(self.default)
        if self.required:
            return _Unfit("This question needs an answer.")
        return _Skipped()

    def _read_many(self, word: str) -> _Reading:
        # the whole reply may be one option's text ("New York"), else numbers/texts between separators
        whole = _pick(word, [str(option) for option in self.options])
        if isinstance(whole, int):
            return _Parsed([self.options[whole]])
        picked: list[int] = []
        for token in _SEPARATORS.split(word):
            if not token:
                continue
            index = _pick(token, [str(option) for option in self.options])
            if isinstance(index, str):
                return _Unfit(index[:1].upper() + index[1:] + ".")
            if index not in picked:
                picked.append(index)
        if not picked:
            return _Unfit("Name at least one option.")
        return _Parsed([self.options[index] for index in picked])


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _read_number(word: str, *, integer: bool) -> _Reading:
    word = word.replace(" ", "")
    if len(word) > _MAX_NUMBER_CHARS:
        return _Unfit(f"That number is too long (at most {_MAX_NUMBER_CHARS} characters).")
    if not _NUMBER.fullmatch(word):
        return _Unfit(f"{quote(word)} is not a number.")
    if _WHOLE.fullmatch(word):
        return _Parsed(int(word))
    value = float(word)
    if not math.isfinite(value):
        return _Unfit("That number is too large.")
    if integer:
        if not value.is_integer():
            return _Unfit(f"{quote(word)} is not a whole number.")
        return _Parsed(int(value))
    return _Parsed(value)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _schema_problem(check: SchemaCheck | None, instance: Any) -> str | None:
    """What is wrong with ``instance`` by ``check``, bounded; None if it is fine or cannot be checked."""
    if check is None:
        return None
    try:
        problem = check.problem(instance)
    except Exception:  # a schema jsonschema cannot apply (unknown type, unresolvable $ref): not checked, as in the App
        return None
    if problem is None:
        return None
    return _cut(problem.message, 300)


# --------------------------------------------------------------------------------- cards


CardKind = Literal["choice", "confirm", "input"]


@dataclass
class Card:
    """One open call as a sequence of text questions, and the answers given so far."""

    call: ToolCall
    kind: CardKind
    heading: str
    questions: list[Question]
    details: list[str] = field(default_factory=list)
    #: the whole form's check (input), run once every field is answered
    form: SchemaCheck | None = None
    step: int = 0
    values: dict[str, Any] = field(default_factory=dict)
    shown: bool = False

    @property
    def title(self) -> str:
        """The question, cut to one short line (for notices about the card)."""
        return _cut(self.heading)

    def prompt(self, waiting: int) -> str:
        """The text that asks the current question (``waiting``: how many cards wait after this one)."""
        # plain symbols only: a chat app without a colour emoji font must still show them
        icon = "⚠ " if self.kind == "confirm" and self.call.risk in HIGH_RISK else ""
        more = f" ({waiting} more waiting)" if waiting else ""
        lines = [f"{icon}{self.heading}{more}", *self.details]
        origin = self.call.origin
        if origin is not None:  # which agent session asks, when several share the App
            kind = ORIGIN_TEXT.get(origin.kind, "Agent")
            lines.insert(0, f"[{kind} · {origin.label}]" if origin.label else f"[{kind}]")
        question = self.questions[self.step]
        if self.kind == "input" and question.name:
            count = len(self.questions)
            where = f"Question {self.step + 1} of {count}: " if count > 1 else ""
            optional = "" if question.required else " (optional)"
            lines.append(f"{where}{question.title}{optional}" + (f" — {question.hint}" if question.hint else ""))
        lines.extend(question.lines())
        lines.append(question.instruction())
        return "\n".join(lines)


def build_card(call: ToolCall) -> Card | None:
    """The text card of ``call``, or None when the tool has no interactive text form."""
    args = call.arguments
    if call.name == "choice":
        options = [str(option) for option in args.get("options") or []]
        question = Question(kind="one", options=options)
        return Card(call, "choice", str(args.get("question") or "Choose one"), [question])
    if call.name == "confirm":
        risk = args.get("risk") if isinstance(args.get("risk"), str) else call.risk
        details = []
        if risk:
            details.append(RISK_LABEL.get(risk, f"Risk: {risk}"))
        if args.get("details"):
            details.append(str(args["details"]))
        question = Question(kind="yesno")
        return Card(call, "confirm", str(args.get("message") or "Do you approve?"), [question], details)
    if call.name == "input":
        fields = args.get("fields")
        questions = _questions(fields) if isinstance(fields, dict) else []
        form = SchemaCheck.of(fields) if questions and isinstance(fields, dict) else None
        if not questions:  # as the App: one required text answer
            questions = [Question(kind="text", name="")]
        return Card(call, "input", str(args.get("prompt") or "Please fill in"), questions, form=form)
    return None


def _questions(fields: dict[str, Any]) -> list[Question]:
    properties = fields.get("properties")
    if not isinstance(properties, dict) or not properties:
        return []
    required = fields.get("required")
    required = required if isinstance(required, list) else []
    defs: dict[str, Any] = {key: fields[key] for key in ("$defs", "definitions") if key in fields}
    questions = []
    for name, schema in properties.items():
        schema = schema if isinstance(schema, dict) else {}
        check = SchemaCheck.of({"type": "object", "properties": {name: schema}, **defs})
        questions.append(_question(str(name), schema, name in required, check))
    return questions


def _question(name: str, schema: dict[str, Any], required: bool, check: SchemaCheck) -> Question:
    types = schema.get("type")
    kinds = [types] if isinstance(types, str) else [t for t in types if t != "null"] if isinstance(types, list) else []
    kind_name = kinds[0] if kinds else None
    items: dict[str, Any] = schema["items"] if isinstance(schema.get("items"), dict) else {}
    kind: QuestionKind
    options: list[Any] = []
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        kind, options = "one", list(schema["enum"])
    elif kind_name == "array" and isinstance(items.get("enum"), list) and items["enum"]:
        kind, options = "many", list(items["enum"])
    elif kind_name == "boolean":
        kind = "yesno"
    elif kind_name == "number":
        kind = "number"
    elif kind_name == "integer":
        kind = "integer"
    elif kind_name in ("object", "array"):
        kind = "json"
    else:
        kind = "text"
    return Question(
        kind=kind,
        title=str(schema.get("title") or name),
        hint=str(schema.get("description") or ""),
        options=options,
        required=required,
        default=schema.get("default", _MISSING),
        json_type=kind_name or "object",
        check=check,
        name=name,
    )


def reply_text(reply: Text) -> str:
    """An agent reply as a text client reads it: files it cannot show are named, a cut reply says so."""
    lines = [reply.text] if reply.text else []
    if reply.interrupted:
        lines.append("[the reply stopped here: the agent was interrupted]")
    for file in reply.attachments:
        lines.append(f"[a file this chat cannot show: {file.name} ({file.mime}, {file.size:,} bytes)]")
    return "\n".join(lines)


def calculate(call: ToolCall) -> tuple[str, ToolResult]:
    """The calculator's card, computed here as the App computes it: what to show, and the result."""
    action, a, b = call.action, call.arguments.get("a"), call.arguments.get("b")
    operation = _OPERATIONS.get(action or "")
    if operation is None:
        message = f'the calculator has no action "{action}"'
        return message, _result(call, "unsupported", {"message": message})
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
    if not numbers:
        return "a and b must be numbers", _result(call, "failed", {"message": "a and b must be numbers"})
    assert isinstance(a, int | float) and isinstance(b, int | float)
    symbol, compute = operation
    if action == "divide" and b == 0:
        return f"{a} ÷ {b} = — (division by zero)", _result(call, "failed", {"message": "division by zero"})
    try:
        value = compute(a, b)
    except OverflowError:  # an int too large for a float
        value = math.inf
    if isinstance(value, float) and not math.isfinite(value):
        message = "the result is not a finite number"
        return f"{a} {symbol} {b}: {message}", _result(call, "failed", {"message": message})
    return f"{a} {symbol} {b} = {value}", _result(call, "completed", {"value": value})


def _result(call: ToolCall, status: str, result: dict[str, Any]) -> ToolResult:
    return ToolResult.model_validate(
        {"call_id": call.call_id, "name": call.name, "action": call.action, "status": status, "result": result}
    )


# ---------------------------------------------------------------------------------- state


class TextMode:
    """The text cards of one WuKongIM user (see the module docstring): fed envelopes and replies."""

    def __init__(self, setting: TextCardsSetting = "auto") -> None:
        self.setting: TextCardsSetting = setting
        #: whether the user's client sent a LineUp envelope (it draws cards itself)
        self.declared = False
        #: the open cards in the order they came: the first one is being asked
        self.cards: OrderedDict[str, Card] = OrderedDict()
        #: answered cards, kept in case the agent refuses the answer
        self._sent: OrderedDict[str, Card] = OrderedDict()
        #: after a welcome: how many re-sent calls are still to come, and those that came
        self._expect = 0
        self._confirmed: set[str] = set()

    @property
    def active(self) -> bool:
        """Whether this user gets text instead of envelopes."""
        return self.setting == "always" or (self.setting == "auto" and not self.declared)

    def declare(self) -> None:
        """The user's client sent a LineUp envelope: it draws cards (with ``auto``, text stops)."""
        self.declared = True
        if not self.active:
            self.cards.clear()  # its device.hello re-sends the live calls as envelopes
            self._sent.clear()

    # ------------------------------------------------------------------------- from the agent

    def from_agent(self, text: str) -> list[Output]:
        """What to do with one encoded envelope the hub sends this user."""
        try:
            message = codec.decode(text)
        except ProtocolError:
            return []
        return self._from_agent(message)

    def _from_agent(self, message: Envelope) -> list[Output]:
        payload = message.payload
        if isinstance(payload, ToolCall):
            return self._on_call(payload)
        if isinstance(payload, ToolCancel):
            return self._on_cancel(payload)
        if isinstance(payload, Text):  # an agent reply (its message.delta pieces are not said: no edits here)
            words = reply_text(payload)
            return [Say(words)] if words else []
        if isinstance(payload, Error):
            return self._on_error(payload)
        if isinstance(payload, DeviceWelcome):
            return self._on_welcome(payload)
        return []  # tool.list, agent.status, acks: nothing a person needs to read

    def _on_call(self, call: ToolCall) -> list[Output]:
        if self._expect:
            self._confirmed.add(call.call_id)
            self._expect -= 1
        known = self.cards.get(call.call_id)
        out: list[Output] = []
        if known is not None:  # re-sent after a lost message: ask the current question again
            if known.shown and self._current() is known:
                out.append(Say(self._prompt(known)))
        elif call.call_id in self._sent:
            pass  # answered already; the answer is on its way
        elif call.name == "calculator":
            shown, result = calculate(call)
            out += [Say(shown), CardAnswer(result)]
        else:
            card = build_card(call)
            if card is None:
                message = f'this chat shows only text, and tool "{call.name}" has no text form'
                out.append(Say(f'The agent asked for "{call.name}", which cannot be shown in this chat; it was told.'))
                out.append(CardAnswer(_result(call, "unsupported", {"message": message})))
            else:
                self.cards[call.call_id] = card
                if self._current() is card:
                    out.append(Say(self._prompt(card)))
        if self._expect == 0 and self._confirmed:
            out += self._drop_unconfirmed()
        return out

    def _on_welcome(self, welcome: DeviceWelcome) -> list[Output]:
        """A (re-)attach: ``pending`` live calls follow; open cards not among them ended meanwhile."""
        self._expect, self._confirmed = welcome.pending, set()
        return self._drop_unconfirmed() if welcome.pending == 0 else []

    def _drop_unconfirmed(self) -> list[Output]:
        confirmed, self._confirmed, self._expect = self._confirmed, set(), 0
        stale = [call_id for call_id in self.cards if call_id not in confirmed]
        out: list[Output] = []
        for call_id in stale:
            out += self._close(call_id, lambda title: f"✖ Closed meanwhile: {title}")
        return out

    def _on_cancel(self, cancel: ToolCancel) -> list[Output]:
        reason = cancel.reason or "cancelled by the agent"
        notice: Callable[[str], str]
        if reason == ANSWERED_ELSEWHERE:
            notice = lambda title: f"✓ Answered on another device: {title}"  # noqa: E731
        elif reason.startswith("expired"):
            notice = lambda title: f"✖ Expired: {title} (no answer in time)"  # noqa: E731
        else:
            notice = lambda title: f"✖ Cancelled: {title} ({_cut(reason, 200)})"  # noqa: E731
        self._sent.pop(cancel.call_id, None)
        return self._close(cancel.call_id, notice)

    def _on_error(self, error: Error) -> list[Output]:
        card = self._sent.pop(error.call_id, None) if error.call_id else None
        if card is not None and error.code == "invalid_result":  # the agent refused the answer: ask again
            card.step, card.values = 0, {}
            self.cards[card.call.call_id] = card
            self.cards.move_to_end(card.call.call_id, last=False)
            return [Say(f"⚠ The agent did not take that answer: {error.message}\n\n{self._prompt(card)}")]
        if error.code in ("call_closed", "unknown_call"):
            return [Say(f"⚠ That answer came too late: {error.message}")]
        return [Say(f"⚠ {error.message}")]

    def _close(self, call_id: str, notice: Callable[[str], str]) -> list[Output]:
        """Remove the card of ``call_id``; a card the user saw gets ``notice``, and the next card is asked."""
        card = self.cards.get(call_id)
        if card is None:
            return []
        was_current = self._current() is card
        del self.cards[call_id]
        if not card.shown:
            return []
        text = notice(card.title)
        following = self._current()
        if was_current and following is not None:
            text += "\n\n" + self._prompt(following)
        return [Say(text)]

    def closed_by_restart(self, calls: list[tuple[ToolCall, str]]) -> list[Output]:
        """Say that the cards of ``calls`` (request, why it ended) the agent's previous run left open are closed."""
        lines = []
        for request, reason in calls:
            card = build_card(request)
            if card is not None:
                lines.append(f"✖ Closed: {card.title} ({_cut(reason, 200)})")
        return [Say("\n".join(lines))] if lines else []

    # -------------------------------------------------------------------------- from the user

    def from_user(self, reply: str) -> list[Output] | None:
        """What to do with a text the user sent; None when it is not an answer (it goes to the agent)."""
        card = self._current()
        if card is None or not card.shown:
            return None
        if reply.lstrip().startswith("/") and normalized(reply) not in CANCEL_WORDS:
            return None  # a command for the agent (/stop, /new...)
        if len(reply) > MAX_REPLY_CHARS:
            return [Say(f"That reply is too long ({len(reply):,} characters; at most {MAX_REPLY_CHARS:,}).")]
        try:
            codec.check_storable(reply)
        except ProtocolError:
            return [Say("Your reply holds characters that are not valid text; please type it again.")]
        question = card.questions[card.step]
        if normalized(reply) in CANCEL_WORDS:
            if card.kind == "confirm":
                return self._finish(card, "rejected", {"approved": False}, "✖ You rejected this.")
            return self._finish(card, "cancelled", {"message": _CANCELLED_BY_USER}, "✖ Cancelled.")
        reading = question.read(reply)
        if isinstance(reading, _Unfit):
            return [Say(f"{reading.problem} {question.instruction()}")]
        if card.kind == "choice":
            assert isinstance(reading, _Parsed)
            index = reading.value
            selected = question.options[index]
            return self._finish(card, "completed", {"selected": selected, "index": index}, f"✓ You chose: {selected}")
        if card.kind == "confirm":
            assert isinstance(reading, _Parsed)
            if reading.value:
                return self._finish(card, "completed", {"approved": True}, "✓ You approved this.")
            return self._finish(card, "rejected", {"approved": False}, "✖ You rejected this.")
        return self._on_field(card, question, reading)

    def _on_field(self, card: Card, question: Question, reading: _Reading) -> list[Output]:
        name = question.name or "answer"
        if isinstance(reading, _Parsed):
            value = question.options[reading.value] if question.kind == "one" else reading.value
            try:
                codec.check_storable(value)  # JSON may spell what the reply itself does not hold ("\\ud800", 1e999)
            except ProtocolError as exc:
                return [Say(f"That answer cannot be kept ({exc}). {question.instruction()}")]
            problem = _schema_problem(question.check, {name: value})
            if problem is not None:
                return [Say(f"{problem[:1].upper()}{problem[1:]}. {question.instruction()}")]
            card.values[name] = value
        else:
            card.values.pop(name, None)
        if card.step + 1 < len(card.questions):
            card.step += 1
            return [Say(card.prompt(len(self.cards) - 1))]
        problem = _schema_problem(card.form, card.values)
        if problem is not None:  # the form as a whole does not fit (fields that depend on each other)
            card.step, card.values = 0, {}
            return [Say(f"⚠ {problem}. Let us go through the form again.\n\n{card.prompt(len(self.cards) - 1)}")]
        summary = ", ".join(f"{key}: {_show(value)}" for key, value in card.values.items())
        return self._finish(card, "completed", {"values": dict(card.values)}, _cut(f"✓ Sent {summary}".rstrip(), 300))

    def _finish(self, card: Card, status: str, result: dict[str, Any], said: str) -> list[Output]:
        call_id = card.call.call_id
        del self.cards[call_id]
        self._sent[call_id] = card
        while len(self._sent) > SENT_KEPT:
            self._sent.popitem(last=False)
        following = self._current()
        if following is not None:
            said += "\n\n" + self._prompt(following)
        return [CardAnswer(_result(card.call, status, result)), Say(said)]

    # ------------------------------------------------------------------------------- shared

    def _current(self) -> Card | None:
        return next(iter(self.cards.values()), None)

    def _prompt(self, card: Card) -> str:
        card.shown = True
        return card.prompt(len(self.cards) - 1)
