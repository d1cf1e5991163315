"""Every use of nanobot, one named function each (nanobot-ai 0.3.x).

Besides its tool extension point (the ``Tool`` base class, ``current_request_context``), LineUp
needs one nanobot internal: the in-flight turn's checkpoint in the session's metadata, so that a
card withdrawn by ``/stop`` reaches the model as LineUp's ``cancelled`` result rather than
nanobot's generic "interrupted" line. A nanobot upgrade that moves it breaks one function here.
"""

from __future__ import annotations

import json
from typing import Any

from nanobot.agent.tools.base import Tool as Tool
from nanobot.agent.tools.context import current_request_context as current_request_context

#: where nanobot keeps the in-flight turn in ``Session.metadata`` (``nanobot.session.recovery``)
CHECKPOINT_KEY = "runtime_checkpoint"
#: the message metadata of a cron job's turn (``nanobot.cron.session_turns``)
CRON_TRIGGER = "_cron_trigger"


def dispatched_turn(task: Any) -> bool:
    """Whether ``task`` is a turn nanobot's agent loop runs from its bus (``AgentLoop._dispatch``), which it
    cancels itself on ``/stop``; not a direct run (``nanobot agent -m``, the SDK) whose caller owns the task."""
    return getattr(task.get_coro(), "__qualname__", "") == "AgentLoop._dispatch"


def cron_job(context: Any) -> str | None:
    """The cron job's name when ``context`` is a cron job's turn, else None."""
    trigger = (getattr(context, "metadata", None) or {}).get(CRON_TRIGGER)
    if not isinstance(trigger, dict):
        return None
    return str(trigger.get("job_name") or trigger.get("job_id") or "cron")


def record_result(sessions: Any, session_key: str | None, name: str, arguments: dict[str, Any], content: str) -> bool:
    """Make ``content`` the result of the pending call of tool ``name`` in the session's checkpoint.

    nanobot turns a stopped turn's pending calls into "Task interrupted" results; a call moved to
    ``completed_tool_results`` keeps its own. The call with the same arguments is taken, else the
    first of that name. False when there is no such checkpoint or call.
    """
    if sessions is None or not session_key:
        return False
    checkpoint = sessions.get_or_create(session_key).metadata.get(CHECKPOINT_KEY)
    pending = checkpoint.get("pending_tool_calls") if isinstance(checkpoint, dict) else None
    if not isinstance(pending, list):
        return False
    named = [call for call in pending if isinstance(call, dict) and call.get("function", {}).get("name") == name]
    same = [call for call in named if _parsed(call["function"].get("arguments")) == arguments]
    if not (same or named):
        return False
    call = (same or named)[0]
    pending.remove(call)
    row = {"role": "tool", "tool_call_id": call.get("id"), "name": name, "content": content}
    checkpoint.setdefault("completed_tool_results", []).append(row)
    return True


def _parsed(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
