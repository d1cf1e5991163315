"""The tool registry: built-in, hook-registered and App-declared tools in one place.

It validates a call's arguments against the action's ``inputSchema`` before anything is sent,
and flattens each tool to the function schema a model calls by name (``app`` and ``toolset``
tools take an ``action`` argument; see :func:`~lineup_plugin.tools.agent_schema.function_schema`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from pydantic import TypeAdapter, ValidationError

from ..errors import ArgumentsError, DuplicateToolError, ProtocolError, ToolError
from ..protocol.base import validate
from ..protocol.tools import ActionDefinition, Risk, ToolDefinition
from .agent_schema import function_schema
from .argcheck import Predicate, compile_schema

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

Handler = Callable[..., Any]


class Register(Protocol):
    """The ``register`` callable handed to the ``register_tools`` hook."""

    def __call__(
        self,
        tool: ToolDefinition | dict[str, Any] | Handler,
        *,
        name: str | None = None,
        description: str | None = None,
        risk: Risk | None = None,
    ) -> ToolDefinition: ...


@dataclass
class ActionCheck:
    """One action of a tool and its argument check, built once (on the tool's first call)."""

    spec: ActionDefinition
    fast: Predicate | None
    _validator: Draft202012Validator | None = None

    @classmethod
    def of(cls, spec: ActionDefinition) -> ActionCheck:
        """Compile the check of ``spec``'s inputSchema."""
        return cls(spec, compile_schema(spec.input_schema))

    def check(self, arguments: Any, where: str) -> None:
        """Raise ArgumentsError unless ``arguments`` satisfies the inputSchema (see check_arguments)."""
        if not isinstance(arguments, dict):
            raise ArgumentsError(f"{where}: arguments must be an object", path="", expected="object")
        if self.fast is None or not self.fast(arguments):
            if self._validator is None:
                self._validator = _validator(self.spec.input_schema)
            _raise_first_error(self._validator, arguments, where)


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    # imported on first use: jsonschema takes ~60 ms to import, and the simple schemas most tools
    # have never need it (see lineup_plugin.tools.argcheck)
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema)


@dataclass
class RegisteredTool:
    """A tool and where it came from.

    ``handler`` is set for in-process tools (run by the plugin), ``None`` for App tools.
    ``source`` is the plugin name, or ``app:<device_id>`` for tools an App declared.
    ``checks`` caches each action's compiled argument check (the definition is not changed
    after registration).
    """

    definition: ToolDefinition
    source: str
    handler: Handler | None = None
    adapter: TypeAdapter[Any] | None = None
    checks: dict[str | None, ActionCheck] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.definition.name

    @property
    def in_process(self) -> bool:
        """Whether the tool runs in the agent's process rather than on the App."""
        return self.handler is not None


def _check_schema(schema: dict[str, Any], where: str) -> None:
    if compile_schema(schema) is None:  # a schema the fast check compiles is valid JSON Schema already
        from jsonschema import Draft202012Validator, SchemaError

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise ToolError(f"{where}: invalid inputSchema: {exc.message}") from None
    if schema.get("type", "object") != "object":
        raise ToolError(f"{where}: inputSchema must describe an object, not {schema.get('type')!r}")


def definition_from_function(
    func: Handler, *, name: str | None = None, description: str | None = None, risk: Risk | None = None
) -> tuple[ToolDefinition, TypeAdapter[Any]]:
    """The action-tool definition of a typed Python function, and the adapter that calls it."""
    # pydantic validates a call to a function (validate_call's way); a function is no TypeForm, hence the cast
    adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, func))
    schema = adapter.json_schema()
    schema.pop("additionalProperties", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    definition = ToolDefinition(
        name=name or func.__name__,
        type="action",
        description=description or inspect.getdoc(func) or "",
        inputSchema=schema,
        risk=risk,
    )
    return definition, adapter


class Registry:
    """Every tool the agent can call, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[RegisteredTool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> RegisteredTool | None:
        """The tool registered under ``name``, if any."""
        return self._tools.get(name)

    def definitions(self) -> list[ToolDefinition]:
        """The wire definitions of every tool, in registration order."""
        return [tool.definition for tool in self._tools.values()]

    def add(
        self,
        tool: ToolDefinition | dict[str, Any] | Handler,
        *,
        source: str,
        name: str | None = None,
        description: str | None = None,
        risk: Risk | None = None,
    ) -> ToolDefinition:
        """Register one tool from ``source``; see the ``register_tools`` hook for what ``tool`` may be."""
        handler: Handler | None = None
        adapter: TypeAdapter[Any] | None = None
        if isinstance(tool, ToolDefinition | dict):
            try:
                definition: ToolDefinition = validate(ToolDefinition, tool)
            except ProtocolError as exc:
                raise ToolError(f"plugin {source!r}: invalid tool definition: {exc}") from None
            updates = {k: v for k, v in {"name": name, "description": description, "risk": risk}.items() if v}
            if updates:
                definition = definition.model_copy(update=updates)
        elif callable(tool):
            try:
                definition, adapter = definition_from_function(tool, name=name, description=description, risk=risk)
            except Exception as exc:
                raise ToolError(f"plugin {source!r}: cannot derive a schema from {tool!r}: {exc}") from None
            handler = tool
        else:
            raise ToolError(f"plugin {source!r}: cannot register {tool!r}: not a tool definition or function")
        for action in self._actions(definition):
            _check_schema(action.input_schema, f"tool {definition.name!r} action {action.name!r}")
        existing = self._tools.get(definition.name)
        if existing is not None:
            raise DuplicateToolError(
                f"tool {definition.name!r} is registered by both {existing.source!r} and {source!r}"
            )
        self._tools[definition.name] = RegisteredTool(definition, source, handler, adapter)
        return definition

    def registrar(self, source: str) -> Register:
        """A ``register`` callable that adds tools on behalf of plugin ``source``."""

        def register(
            tool: ToolDefinition | dict[str, Any] | Handler,
            *,
            name: str | None = None,
            description: str | None = None,
            risk: Risk | None = None,
        ) -> ToolDefinition:
            return self.add(tool, source=source, name=name, description=description, risk=risk)

        return register

    def remove_source(self, source: str) -> list[str]:
        """Remove every tool ``source`` registered; returns their names."""
        gone = [name for name, tool in self._tools.items() if tool.source == source]
        for name in gone:
            del self._tools[name]
        return gone

    def replace_source(self, source: str, tools: list[ToolDefinition]) -> list[str]:
        """Set the tools of ``source`` (e.g. an App's ``tool.list``), skipping names others own.

        Returns the names that were skipped because another source already has them.
        """
        self.remove_source(source)
        skipped = []
        for definition in tools:
            if definition.name in self._tools:
                skipped.append(definition.name)
                continue
            self.add(definition, source=source)
        return skipped

    @staticmethod
    def _actions(definition: ToolDefinition) -> list[ActionDefinition]:
        if definition.type == "action":
            return [definition.action(None)]
        return list(definition.actions or ())

    def resolve(self, name: str, action: str | None, arguments: Any) -> tuple[RegisteredTool, ActionDefinition]:
        """Find the tool and action of a call and check ``arguments`` against its inputSchema.

        Raises ArgumentsError naming the field and what was expected.
        """
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise ArgumentsError(f"unknown tool {name!r} (known tools: {known})", path="name")
        definition = tool.definition
        key = None if definition.type == "action" else action
        entry = tool.checks.get(key)
        if entry is None:
            entry = tool.checks[key] = ActionCheck.of(self._action(definition, action))
        spec = entry.spec
        if definition.type == "action" and action is not None:
            spec = definition.action(action)  # any action name addresses an action tool: keep the one given
        entry.check(arguments, f"{name}.{spec.name}" if definition.type != "action" else name)
        return tool, spec

    @staticmethod
    def _action(definition: ToolDefinition, action: str | None) -> ActionDefinition:
        if definition.type == "action":
            return definition.action(None)
        names = definition.action_names()
        if action is None:
            raise ArgumentsError(
                f"tool {definition.name!r} needs an 'action', one of {names}", path="action", expected=f"one of {names}"
            )
        try:
            return definition.action(action)
        except KeyError:
            raise ArgumentsError(
                f"tool {definition.name!r} has no action {action!r}; expected one of {names}",
                path="action",
                expected=f"one of {names}",
            ) from None

    def function_schemas(self) -> list[dict[str, Any]]:
        """Each tool as a bare function schema ``{name, description, parameters}`` for a model."""
        return [function_schema(tool.definition) for tool in self._tools.values()]

    def run_in_process(self, tool: RegisteredTool, arguments: dict[str, Any]) -> Any:
        """Call an in-process tool's function with validated arguments (may return an awaitable)."""
        assert tool.adapter is not None
        try:
            return tool.adapter.validate_python(arguments)
        except ValidationError as exc:
            raise ArgumentsError(f"{tool.name}: {exc.errors(include_url=False)[0]['msg']}") from None


def check_arguments(schema: dict[str, Any], arguments: Any, where: str) -> None:
    """Raise ArgumentsError unless ``arguments`` satisfies the JSON Schema ``schema``."""
    if not isinstance(arguments, dict):
        raise ArgumentsError(f"{where}: arguments must be an object", path="", expected="object")
    _raise_first_error(_validator(schema), arguments, where)


def _raise_first_error(validator: Draft202012Validator, arguments: dict[str, Any], where: str) -> None:
    """Raise ArgumentsError naming the field and what was expected, for the most relevant error if any."""
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = next(name for name in error.validator_value if name not in error.instance)
        path = f"{path}.{missing}" if path else str(missing)
        expected = "a value (required)"
    elif error.validator == "additionalProperties":
        expected = error.message
    else:
        expected = f"{error.validator} {error.validator_value!r}"
    field = f"field {path!r}" if path else "arguments"
    raise ArgumentsError(f"{where}: {field}: {error.message}", path=path, expected=expected)


def split_arguments(definition: ToolDefinition, flat: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Split the model's flat arguments into ``(action, arguments)`` for a tool call."""
    if definition.type == "action":
        return None, dict(flat)
    rest = dict(flat)
    action = rest.pop("action", None)
    return (action if isinstance(action, str) else None), rest
