"""LineUp's Hermes hooks and its ``/lineup`` command.

- ``on_session_start``: the interactive CLI takes the server when its session starts;
- ``on_session_start`` / ``pre_llm_call``: the interactive CLI's dangerous-command approvals
  become App cards too, racing its terminal prompt (:mod:`.approval`);
- ``pre_llm_call`` / ``on_session_end``: a turn starts or ends — the App shows ``thinking``, then
  ``idle`` (or ``interrupted``), and an attached agent is known to be running in between;
- ``post_llm_call``: outside the gateway (which replies through the platform), the agent's reply
  is mirrored to the App;

Status and replies are only those of sessions the App takes part in
(:meth:`~.runtime.HermesRuntime.follows`): every other agent of the process — another platform's
bot, a cron job, the CLI before it used LineUp — stays private.
- ``on_session_finalize``: the interactive CLI shuts down, and the server with it;
- ``/lineup``: serve the App from this process if nobody does yet, and say where it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runtime import HermesRuntime

#: the Hermes hooks LineUp registers (methods of :class:`HermesHooks` of the same names)
HOOKS = ("on_session_start", "pre_llm_call", "post_llm_call", "on_session_end", "on_session_finalize")
COMMAND = "lineup"
COMMAND_HELP = "Show where the LineUp App is served and how to open it"


class HermesHooks:
    """The hook callbacks and the slash command, for one :class:`~.runtime.HermesRuntime`."""

    def __init__(self, runtime: HermesRuntime) -> None:
        self.runtime = runtime
        self.service = runtime.service

    def _relevant(self, session_id: str | None, platform: str | None) -> bool:
        """Whether a session's events concern the App: a session it takes part in (see ``follows``)."""
        return self.runtime.follows(session_id, platform)

    def on_session_start(self, session_id: str = "", platform: str = "", **_: Any) -> None:
        """Interactive CLI: the session start is when this process takes the server."""
        self.runtime.hook_cli_approval()
        if self.service.role == "cli":
            self.service.ensure_started("cli session start")

    def pre_llm_call(self, session_id: str = "", platform: str = "", **_: Any) -> None:
        """A turn starts: remember the session runs; the App shows ``thinking``. In the interactive
        CLI, its approval prompt gets an App card (the turn's thread included)."""
        self.runtime.hook_cli_approval()
        self.runtime.attached.turn(str(session_id), running=True)
        self.runtime.note_platform(str(session_id), platform)
        if self._relevant(session_id, platform):
            self.service.report_status("thinking", conversation=self.runtime.conversation_of(session_id, platform))

    def post_llm_call(self, session_id: str = "", assistant_response: str = "", platform: str = "", **_: Any) -> None:
        """Outside the gateway (which replies through the platform), mirror the reply of a session the App follows."""
        if assistant_response and not self.runtime.in_gateway and self._relevant(session_id, platform):
            self.service.send_text(assistant_response, conversation=self.runtime.conversation_of(session_id, platform))

    def on_session_end(self, session_id: str = "", interrupted: bool = False, platform: str = "", **_: Any) -> None:
        """A turn ended: the App shows ``idle`` (or ``interrupted``)."""
        self.runtime.attached.turn(str(session_id), running=False)
        if self._relevant(session_id, platform):
            where = self.runtime.conversation_of(session_id, platform)
            self.service.report_status("interrupted" if interrupted else "idle", conversation=where)

    def on_session_finalize(self, reason: str = "", **_: Any) -> None:
        """The interactive CLI shuts down: stop the server."""
        if self.service.role == "cli" and reason == "shutdown":
            self.service.stop()

    def lineup_command(self, raw_args: str = "") -> str:
        """``/lineup``: serve the App from this process if nobody does yet, and say where it is.

        The link with the token is shown only outside the gateway (the CLI user is on this
        machine; a gateway command may come from any chat platform).
        """
        try:
            self.service.ensure_started("/lineup command")
        except Exception as exc:
            return f"LineUp: cannot serve the App: {exc}"
        if not self.runtime.in_gateway:
            self.runtime.join_cli_session()  # the user at the CLI asked for the App: it follows this session
        return "LineUp: " + self.service.status_line(show_link=not self.runtime.in_gateway)
