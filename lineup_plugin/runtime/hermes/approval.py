"""The interactive CLI's dangerous-command approval as an App card, racing the terminal prompt.

Hermes asks the user at the ``hermes`` terminal through the approval callback the CLI registers
(its prompt panel: once, session, always, deny). LineUp wraps that callback
(:func:`~.compat.hook_cli_approval`): while the terminal prompt is open, the App shows the same
question as a ``confirm`` card with the same choices (forwarded to the serving process, like any
LineUp call of this CLI). The first answer wins:

- answered in the terminal: the card is withdrawn on every device;
- answered on the App: the terminal prompt is answered with that choice, as its keys would
  (:func:`~.compat.answer_cli_approval`), so it closes and prints the outcome.

Either way the CLI's prompt returns the choice to Hermes, whose own approval gate records it: a
session approval, or a permanent one in ``config.yaml``. The prompt's own timeout (Hermes'
``approvals.timeout``, also the card's deadline) still denies.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from . import compat
from .common import approval_card, approval_choice, approval_timeout

if TYPE_CHECKING:
    from ...protocol.messages import ToolResult

log = logging.getLogger(__name__)


class Asker(Protocol):
    """Shows an approval card in the CLI's conversation and waits for its end (:meth:`.HermesRuntime.ask_cli`)."""

    def __call__(self, arguments: dict[str, Any], *, deadline: float, is_interrupted: Callable[[], bool]) -> ToolResult:
        """The card's terminal result; ``cancelled`` once ``is_interrupted`` is true."""
        ...


def racing(ask: Asker, cli: Any, prompt: Callable[..., str]) -> Callable[..., str]:
    """The CLI's approval callback ``prompt``, with an App card racing it (the first answer wins)."""

    def approve(command: str, description: str, *, allow_permanent: bool = True, smart_denied: bool = False) -> str:
        arguments = approval_card(command, description, allow_permanent=allow_permanent, smart_denied=smart_denied)
        offered = [str(c["value"]) for c in arguments["choices"]]
        answered = threading.Event()

        def on_app() -> None:
            try:
                result = ask(arguments, deadline=approval_timeout(), is_interrupted=answered.is_set)
            except Exception:
                log.warning("lineup: the approval card failed", exc_info=True)
                return
            choice = approval_choice(result, offered)
            # an answer may come before the terminal's panel is open: it is applied once the panel is
            while choice is not None and not answered.is_set() and not compat.answer_cli_approval(cli, command, choice):
                answered.wait(0.05)

        threading.Thread(target=on_app, name="lineup-approval", daemon=True).start()
        flags: dict[str, bool] = {"allow_permanent": allow_permanent}
        if smart_denied:
            flags["smart_denied"] = True
        try:
            return prompt(command, description, **flags)
        finally:
            answered.set()

    return approve
