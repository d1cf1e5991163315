"""The registry as the session core sees it: read for the agent's tools, changed by the core's output."""

from __future__ import annotations

from typing import Any

from ..errors import ToolError
from ..protocol.outputs import Applied, RegistryChange, WithdrawTools
from ..protocol.tools import ToolDefinition
from .registry import Registry


class RegistryCatalog:
    """A :class:`~lineup_plugin.protocol.reads.Catalog` over ``registry``, and the one place the
    registry changes an App asked for (:data:`~lineup_plugin.protocol.outputs.RegistryChange`) are applied."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def agent_tools(self) -> list[ToolDefinition]:
        """The tools an App may call on the agent (in-process tools)."""
        return [t.definition for t in self.registry if t.in_process]

    def runs_in_process(self, name: str) -> bool:
        """Whether ``name`` is an agent tool an App may call."""
        tool = self.registry.get(name)
        return tool is not None and tool.in_process

    def check_result(self, name: str, action: str | None, result: dict[str, Any]) -> str | None:
        """None when a completed ``result`` of tool ``name`` satisfies its outputSchema, else what is wrong."""
        return self.registry.check_result(name, action, result)

    def apply(self, change: RegistryChange) -> Applied:
        """Apply one registry change of the session core; what it did (all or nothing when refused)."""
        if isinstance(change, WithdrawTools):
            return Applied(changed=bool(self.registry.remove_source(change.source)))
        if not change.tools:
            return Applied(changed=bool(self.registry.remove_source(change.source)))
        try:
            skipped = self.registry.replace_source(change.source, list(change.tools))
        except ToolError as exc:  # nothing was changed
            return Applied(changed=False, refused=str(exc))
        return Applied(changed=True, skipped=tuple(skipped))
