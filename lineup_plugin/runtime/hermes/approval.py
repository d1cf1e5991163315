"""The CLI's dangerous-command approval as an App card, racing the terminal prompt.

Hermes asks the user of ``hermes`` through the approval callback the CLI registers (its prompt
panel: once, session, always, deny). LineUp wraps that callback
(:func:`~.compat.hook_cli_approval`): while the prompt is open, the App shows the same question
as a ``confirm`` card with the same choices (forwarded to the serving process, like any LineUp
call of this process). The first answer wins:

- answered in the terminal: the card is withdrawn on every device, saying so ("answered in the
  terminal: Allow once");
- answered on the App: the prompt is answered with that choice, as its keys would
  (:func:`~.compat.answer_cli_approval`), so it closes and prints the outcome.

Either way the CLI's prompt returns the choice to Hermes, whose own approval gate records it: a
session approval, or a permanent one in ``config.yaml``. The prompt's own timeout (Hermes'
``approvals.timeout``, also the card's deadline) still denies.

A one-shot ``hermes chat -q`` registers the same prompt, but shows no panel and reads no key:
Hermes waits out ``approvals.timeout`` and denies. There the card is the only way to answer
(``only_way``): a card that ends with no answer (no App connected, expired) denies at once,
which is what Hermes' timeout would have done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from . import compat
from .common import answered_in_terminal, approval_card, approval_choice, approval_timeout

if TYPE_CHECKING:
    from ...protocol.messages import ToolResult

log = logging.getLogger(__name__)


class Asker(Protocol):
    """Shows an approval card in the CLI's conversation and waits for its end (:meth:`.HermesRuntime.ask_cli`)."""

    def __call__(self, arguments: dict[str, Any], *, deadline: float, is_interrupted: Callable[[], bool]) -> ToolResult:
        """The card's terminal result; ``cancelled`` once ``is_interrupted`` is true."""
        ...


class Answered:
    """The check an approval card waits with: true once the terminal's prompt returned, with why (``reason``)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        #: what the card's devices are told when it is withdrawn ("" until the prompt returned)
        self.reason = ""

    def __call__(self) -> bool:
        return self._done.is_set()

    def set(self, reason: str) -> None:
        """The prompt returned: withdraw the card, telling its devices ``reason``."""
        self.reason = reason
        self._done.set()

    def wait(self, timeout: float) -> bool:
        """Block until the prompt returned, ``timeout`` seconds at most; whether it did."""
        return self._done.wait(timeout)


def racing(
    ask: Asker,
    cli: Any,
    prompt: Callable[..., str],
    *,
    only_way: bool = False,
    tell: Callable[[str], None] | None = None,
) -> Callable[..., str]:
    """The CLI's approval callback ``prompt``, with an App card racing it (the first answer wins).

    ``only_way``: nobody can answer ``prompt`` but the App (``hermes chat -q``): a card that ends
    without an answer denies at once, and the person at the terminal, if any, is told where to
    answer by ``tell`` (one line).
    """

    def approve(command: str, description: str, *, allow_permanent: bool = True, smart_denied: bool = False) -> str:
        if only_way and tell is not None:
            shown = command if len(command) <= 80 else command[:79] + "…"
            tell(f"📱 LineUp: approve or deny on the App: {shown} (no answer: denied)")
        arguments = approval_card(command, description, allow_permanent=allow_permanent, smart_denied=smart_denied)
        offered = [str(c["value"]) for c in arguments["choices"]]
        answered = Answered()
        timeout = approval_timeout()

        def on_app() -> None:
            try:
                result = ask(arguments, deadline=timeout, is_interrupted=answered)
            except Exception:
                log.warning("lineup: the approval card failed", exc_info=True)
                result = None
            choice = approval_choice(result, offered) if result is not None else None
            if choice is None and only_way:
                choice = "deny"  # what the prompt's timeout would answer, now: nobody else can
            # an answer may come before the terminal's panel is open: it is applied once the panel is
            while choice is not None and not answered() and not compat.answer_cli_approval(cli, command, choice):
                answered.wait(0.05)

        threading.Thread(target=on_app, name="lineup-approval", daemon=True).start()
        flags: dict[str, bool] = {"allow_permanent": allow_permanent}
        if smart_denied:
            flags["smart_denied"] = True
        started, choice = time.monotonic(), ""
        try:
            choice = prompt(command, description, **flags)
            return choice
        finally:
            timed_out = choice == "deny" and time.monotonic() - started >= timeout
            answered.set(answered_in_terminal(choice, arguments, timed_out=timed_out))

    return approve
