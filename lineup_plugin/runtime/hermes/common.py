"""What every part of the Hermes adapter shares: names, LineUp's config section, the process's
role, and how Hermes' clarify and approval become LineUp cards."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from . import compat

if TYPE_CHECKING:
    from ...hub import Hub
    from ...protocol.messages import Origin, ToolResult

log = logging.getLogger(__name__)

#: the plugin's name in Hermes (``plugins.enabled``, ``plugins.entries.<name>``, platform, toolset)
PLUGIN = "lineup"
TOOLSET = "lineup"
PLATFORM = "lineup"
EMOJI = "📱"
#: the App chat and user as the gateway sees them (LineUp has one human per agent)
APP_CHAT = "app"
APP_USER = "lineup-user"
#: the LineUp conversation of the App chat (:data:`APP_CHAT`); other App conversations are chats of their own id
APP_CONVERSATION = "default"


def app_conversation(chat_id: str) -> str:
    """The LineUp conversation of a gateway chat of the ``lineup`` platform."""
    return APP_CONVERSATION if chat_id in ("", APP_CHAT) else chat_id


def app_chat(conversation_id: str | None) -> str:
    """The gateway chat (``lineup`` platform) of a LineUp conversation: the inverse of :func:`app_conversation`."""
    return APP_CHAT if conversation_id in (None, "", APP_CONVERSATION) else str(conversation_id)


#: how often a card shown for Hermes checks whether Hermes' wait ended another way
SETTLE_POLL = 0.5
#: the keys of ``plugins.entries.<name>`` that Hermes reads for every plugin (not LineUp settings)
HERMES_KEYS = frozenset({"allow_tool_override", "llm"})


def plugin_section(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """LineUp's section of Hermes' config: ``plugins.entries.lineup`` (``{}`` when absent).

    This is the place Hermes gives every plugin for its own settings (Hermes itself reads
    ``allow_tool_override`` and ``llm`` from it). Raises ConfigError when it is not a mapping.
    """
    if config is None:
        config = compat.load_config()
    plugins = config.get("plugins") if isinstance(config, Mapping) else None
    entries = plugins.get("entries") if isinstance(plugins, Mapping) else None
    section = entries.get(PLUGIN) if isinstance(entries, Mapping) else None
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"lineup setting 'plugins.entries.{PLUGIN}': expected a mapping of settings")
    return {key: value for key, value in section.items() if key not in HERMES_KEYS}


def process_role() -> str:
    """What kind of Hermes process this is: ``gateway``, ``cli`` (interactive) or ``process``."""
    if compat.in_gateway_process():
        return "gateway"
    try:
        if compat.interactive_cli() is not None:
            return "cli"
    except Exception:  # pragma: no cover - Hermes internals moved (the compat test names it)
        pass
    return "process"


def hermes_origin(session_id: str, task_id: str) -> Origin | None:
    """A Hermes tool call's session as the App names it: a ``delegate_task`` subagent (by its
    task id, :func:`compat.subagent_of`), a cron job (session ``cron_<job id>_<date>_<time>``,
    labelled with the job's name, else its id), else None (the process's kind)."""
    from ...protocol.messages import Origin  # at run time: off the start path

    subagent = compat.subagent_of(task_id)
    if subagent is not None:
        return Origin(kind="subagent", label=subagent)
    if session_id.startswith("cron_"):
        job = session_id.removeprefix("cron_").rsplit("_", 2)[0]
        name = compat.cron_job_name(job) if job else None
        return Origin(kind="cron", label=(name or job)[:120] or None)
    return None


def clarify_card(question: str, choices: list[str] | None) -> tuple[str, dict[str, Any]]:
    """The LineUp tool and arguments that show Hermes' clarify: a choice card, or an input card."""
    options = [str(c) for c in choices or [] if str(c).strip()]
    if options:
        return "choice", {"question": question, "options": options}
    return "input", {"prompt": question}


def clarify_answer(result: ToolResult) -> str:
    """The text Hermes' clarify gets from a card's result ("" when the user gave no answer)."""
    if result.status != "completed":
        return ""
    value = result.result
    if isinstance(value.get("selected"), str):
        return str(value["selected"])
    values = value.get("values")
    if isinstance(values, dict):
        texts = [str(v) for v in values.values() if v not in (None, "")]
        return "\n".join(texts)
    text = value.get("text") or value.get("value")
    return str(text) if text is not None else ""


#: Hermes' answers to a dangerous-command approval, as the approval card offers them (its own
#: ``once``/``session``/``always``/``deny``, in the order its other platforms show them)
APPROVAL_CHOICES: tuple[dict[str, Any], ...] = (
    {"value": "once", "label": "Allow once", "approves": True},
    {"value": "session", "label": "Allow for this session", "approves": True},
    {"value": "always", "label": "Always allow", "approves": True},
    {"value": "deny", "label": "Deny", "approves": False},
)


def approval_card(
    command: str, description: str, *, allow_permanent: bool = True, smart_denied: bool = False
) -> dict[str, Any]:
    """The ``confirm`` arguments of Hermes' dangerous-command approval: the command and Hermes' choices.

    ``always`` is left out when Hermes does not allow a permanent approval; after a smart deny
    (the owner overrides it) only ``once`` and ``deny``, as Hermes offers.
    """
    offered = [c for c in APPROVAL_CHOICES if allow_permanent or c["value"] != "always"]
    if smart_denied:
        offered = [c for c in offered if c["value"] in ("once", "deny")]
    return {
        "message": f"Allow the agent to run this command? ({description})",
        "details": command,
        "risk": "system_permission",
        "choices": [dict(c) for c in offered],
    }


def approval_choice(result: ToolResult, offered: list[str]) -> str | None:
    """Hermes' answer to an approval from its card's result, or None when the user gave none.

    A choice that was not offered (an App that shows only Approve and Reject, a text client) is
    read as the narrowest answer of its kind: approved ``once``, else ``deny``.
    """
    if result.status not in ("completed", "rejected"):
        return None
    approved = result.status == "completed" and result.result.get("approved") is True
    choice = result.result.get("choice")
    if isinstance(choice, str) and choice in offered:
        granted = next(c["approves"] for c in APPROVAL_CHOICES if c["value"] == choice)
        if granted == approved:
            return choice
    return "once" if approved else "deny"


def answered_in_terminal(choice: str, arguments: dict[str, Any], *, timed_out: bool = False) -> str:
    """Why an approval card is withdrawn once the terminal's prompt returned ``choice``, for its
    devices: "answered in the terminal: Allow once"; the deadline's reason when the prompt's own
    timeout answered (``timed_out``); "" when the prompt returned nothing."""
    if timed_out:
        from ...protocol.live import EXPIRED  # at run time: off the start path

        return EXPIRED
    if not choice:
        return ""
    labels = {str(c.get("value")): str(c.get("label")) for c in arguments.get("choices", ()) if isinstance(c, dict)}
    return f"answered in the terminal: {labels.get(choice, choice)}"


def clarify_timeout() -> float:
    """Hermes' ``agent.clarify_timeout`` (seconds), also the deadline of a clarify card."""
    try:
        return compat.clarify_timeout()
    except Exception:
        return 3600.0


def approval_timeout() -> float:
    """Hermes' ``approvals.timeout`` (seconds), also the deadline of an approval card."""
    try:
        approvals = compat.load_config().get("approvals") or {}
        return float(approvals.get("timeout", 60))
    except Exception:
        return 60.0


class Answer:
    """What to do with the result of a card shown for a Hermes wait, and how to tell that wait ended."""

    def resolve(self, result: ToolResult) -> None:
        """Apply the card's terminal result (runs on a worker thread)."""

    def settled(self) -> bool:
        """Whether Hermes' wait ended some other way: typed reply, ``/approve``, its own timeout..."""
        return False


async def ask(
    hub: Hub,
    name: str,
    arguments: dict[str, Any],
    deadline: float,
    call_id: str,
    answer: Answer,
    conversation_id: str | None = None,
) -> None:
    """On the hub's loop: show a card for a Hermes wait (in ``conversation_id``) and apply its result;
    close it if the wait ended first.

    The call and a watcher run in one task group. The watcher polls ``answer.settled`` every
    :data:`SETTLE_POLL` seconds (Hermes has no event for it) and, once Hermes' wait ended another
    way or ``deadline`` passed, cancels the card on every device — its result then answers
    nothing. When the call ends on its own the watcher is cancelled and the result applied.
    """
    import anyio

    closed = False

    async def watch() -> None:
        nonlocal closed
        end = time.monotonic() + deadline
        while True:
            await anyio.sleep(SETTLE_POLL)
            settled = await anyio.to_thread.run_sync(answer.settled)
            if settled or time.monotonic() > end:
                closed = True  # before the cancel, which ends the call
                await hub.cancel(call_id, "answered in the chat" if settled else "no longer needed")
                return

    result: ToolResult | None = None
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        try:
            options: dict[str, Any] = {"deadline": deadline, "call_id": call_id, "conversation_id": conversation_id}
            result = await hub.call(name, arguments, **options)
        except Exception:
            log.warning("lineup: %s card failed", name, exc_info=True)
        if not closed:  # a watcher that is telling the devices is left to finish
            tasks.cancel_scope.cancel()
    if result is not None and not closed:
        await anyio.to_thread.run_sync(answer.resolve, result)
