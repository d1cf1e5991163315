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
from urllib.parse import unquote

from pydantic import TypeAdapter, ValidationError

from ..errors import ArgumentsError, DuplicateToolError, ProtocolError, ToolError
from ..protocol.base import validate
from ..protocol.tools import RISKS, ActionDefinition, Risk, ToolDefinition
from .agent_schema import function_schema
from .argcheck import Predicate, compile_schema
from .renderers import Renderers

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

Handler = Callable[..., Any]

#: the most tools one source (an App's ``tool.list``) may declare: each is in the model's tool list
MAX_SOURCE_TOOLS = 64
#: the most bytes of definitions (compact JSON) one source may declare, all its tools together
MAX_SOURCE_BYTES = 64 * 1024


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
class SchemaCheck:
    """One JSON Schema, compiled once: the fast predicate, and jsonschema (built on first need) to word errors."""

    schema: dict[str, Any]
    fast: Predicate | None
    _validator: Draft202012Validator | None = None

    @classmethod
    def of(cls, schema: dict[str, Any]) -> SchemaCheck:
        """Compile the check of ``schema``."""
        return cls(schema, compile_schema(schema))

    def problem(self, instance: Any) -> Problem | None:
        """None when ``instance`` is valid, else the most relevant error (see :class:`Problem`)."""
        if self.fast is not None and self.fast(instance):
            return None
        if self._validator is None:
            self._validator = _validator(self.schema)
        return _first_problem(self._validator, instance)


@dataclass(frozen=True, slots=True)
class Problem:
    """Why an instance fails a schema: the JSON ``path`` of the field, what was ``expected``, the ``message``."""

    path: str
    expected: str
    message: str

    def text(self, where: str, whole: str = "arguments") -> str:
        """The problem as one line, naming ``where`` and the field (``whole`` when it is the instance itself)."""
        field = f"field {self.path!r}" if self.path else whole
        return f"{where}: {field}: {self.message}"


@dataclass
class ActionCheck:
    """One action of a tool and the checks of its arguments and results, built once (on first use)."""

    spec: ActionDefinition
    inputs: SchemaCheck
    outputs: SchemaCheck | None

    @classmethod
    def of(cls, spec: ActionDefinition) -> ActionCheck:
        """Compile the checks of ``spec``'s inputSchema and outputSchema."""
        outputs = None if spec.output_schema is None else SchemaCheck.of(spec.output_schema)
        return cls(spec, SchemaCheck.of(spec.input_schema), outputs)

    def check(self, arguments: Any, where: str) -> None:
        """Raise ArgumentsError unless ``arguments`` satisfies the inputSchema (see check_arguments)."""
        if not isinstance(arguments, dict):
            raise ArgumentsError(f"{where}: arguments must be an object", path="", expected="object")
        _raise(self.inputs.problem(arguments), where)

    def check_result(self, result: Any, where: str) -> str | None:
        """None when ``result`` satisfies the outputSchema (or there is none), else what is wrong."""
        if self.outputs is None:
            return None
        problem = self.outputs.problem(result)
        return None if problem is None else problem.text(where, "result")


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    # imported on first use: jsonschema takes ~60 ms to import, and the simple schemas most tools
    # have never need it (see lineup_plugin.tools.argcheck). The registry retrieves nothing: a
    # ``$ref`` is resolved inside the schema or not at all (see check_refs).
    from jsonschema import Draft202012Validator
    from referencing import Registry as References

    return Draft202012Validator(schema, registry=References())


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


def _check_schema(schema: dict[str, Any], where: str, *, kind: str = "inputSchema") -> None:
    """Raise ToolError unless ``schema`` is a valid JSON Schema of an object whose refs stay inside it."""
    if compile_schema(schema) is None:  # a schema the fast check compiles is valid JSON Schema already
        from jsonschema import Draft202012Validator, SchemaError

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise ToolError(f"{where}: invalid {kind}: {exc.message}") from None
        check_refs(schema, f"{where}: {kind}")
    if schema.get("type", "object") != "object":
        raise ToolError(f"{where}: {kind} must describe an object, not {schema.get('type')!r}")


_REF_KEYWORDS = ("$ref", "$dynamicRef")


def check_refs(schema: dict[str, Any], where: str) -> None:
    """Raise ToolError unless every ``$ref`` of ``schema`` is a local ``#/...`` pointer that resolves in it.

    Nothing a schema names is ever fetched or read (no ``http://``, no ``file://``), and a
    ref that cannot be resolved is refused here rather than failing a later call. A nested
    ``$id`` (which would move the base of its refs) is refused too.
    """

    def walk(node: Any, root: bool) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, False)
            return
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key in _REF_KEYWORDS and isinstance(value, str):
                _resolve_local(schema, value, where)
            elif key == "$id" and isinstance(value, str) and not root:
                raise ToolError(f"{where}: a nested $id ({value!r}) is not supported; use local '#/...' refs")
            else:
                walk(value, False)

    walk(schema, True)


def _resolve_local(schema: dict[str, Any], ref: str, where: str) -> None:
    if ref != "#" and not ref.startswith("#/"):
        raise ToolError(f"{where}: $ref {ref!r} is not allowed: only local refs ('#/...') are, nothing is fetched")
    node: Any = schema
    for part in ref[2:].split("/") if ref != "#" else ():
        token = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise ToolError(f"{where}: $ref {ref!r} does not resolve inside the schema")
    if not isinstance(node, dict | bool):
        raise ToolError(f"{where}: $ref {ref!r} does not point at a schema")


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
        #: the App renderers plugins ship for their App tools (the ``register_renderers`` hook)
        self.renderers = Renderers()

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
        self._check_definition(definition)
        existing = self._tools.get(definition.name)
        if existing is not None:
            raise DuplicateToolError(
                f"tool {definition.name!r} is registered by both {existing.source!r} and {source!r}"
            )
        self._tools[definition.name] = RegisteredTool(definition, source, handler, adapter)
        return definition

    def _check_definition(self, definition: ToolDefinition) -> None:
        """Raise ToolError unless every input and output schema of ``definition`` is acceptable."""
        for action in self._actions(definition):
            where = f"tool {definition.name!r} action {action.name!r}"
            _check_schema(action.input_schema, where)
            if action.output_schema is not None:
                _check_schema(action.output_schema, where, kind="outputSchema")

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
        """Set the tools of ``source`` (e.g. an App's ``tool.list``), skipping names others own; all or nothing.

        Returns the names that were skipped because another source already has them. Raises
        ToolError, leaving the tools of ``source`` as they were, when a definition is invalid
        or the set is over :data:`MAX_SOURCE_TOOLS` tools or :data:`MAX_SOURCE_BYTES` of JSON.
        """
        if len(tools) > MAX_SOURCE_TOOLS:
            raise ToolError(f"{len(tools)} tools declared; at most {MAX_SOURCE_TOOLS} are accepted")
        size = sum(len(tool.model_dump_json(by_alias=True, exclude_none=True)) for tool in tools)
        if size > MAX_SOURCE_BYTES:
            raise ToolError(f"the tool definitions take {size} bytes; at most {MAX_SOURCE_BYTES} are accepted")
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise ToolError(f"tools declared twice: {twice}")
        for definition in tools:
            self._check_definition(definition)
        self.remove_source(source)
        skipped = []
        for definition in tools:
            if definition.name in self._tools:
                skipped.append(definition.name)
            else:  # checked above: nothing below can fail
                self._tools[definition.name] = RegisteredTool(definition, source)
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
        entry = self._check_of(tool, action)
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

    def check_result(self, name: str, action: str | None, result: Any) -> str | None:
        """None when ``result`` (a completed call's) satisfies the action's outputSchema, else what is wrong.

        A tool without an outputSchema, or one no longer registered, accepts any result. An app
        or toolset tool's actions each have their own outputSchema; an action tool's is the tool's.
        """
        tool = self._tools.get(name)
        if tool is None:
            return None
        try:
            entry = self._check_of(tool, action)
        except ArgumentsError:
            return None  # no such action: its call was never sent
        return entry.check_result(result, name if tool.definition.type == "action" else f"{name}.{entry.spec.name}")

    def _check_of(self, tool: RegisteredTool, action: str | None) -> ActionCheck:
        """The compiled checks of ``tool``'s ``action`` (cached); raises ArgumentsError for an unknown action."""
        key = None if tool.definition.type == "action" else action
        entry = tool.checks.get(key)
        if entry is None:
            entry = tool.checks[key] = ActionCheck.of(self._action(tool.definition, action))
        return entry

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
    _raise(_first_problem(_validator(schema), arguments), where)


def _raise(problem: Problem | None, where: str) -> None:
    if problem is not None:
        raise ArgumentsError(problem.text(where), path=problem.path, expected=problem.expected)


def _first_problem(validator: Draft202012Validator, instance: Any) -> Problem | None:
    """The most relevant error of ``instance``, naming the field and what was expected; None if valid."""
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(instance))
    if error is None:
        return None
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = next(name for name in error.validator_value if name not in error.instance)
        path = f"{path}.{missing}" if path else str(missing)
        expected = "a value (required)"
    elif error.validator == "additionalProperties":
        expected = error.message
    else:
        expected = f"{error.validator} {error.validator_value!r}"
    return Problem(path, expected, error.message)


def call_risk(tool: RegisteredTool, spec: ActionDefinition, arguments: dict[str, Any]) -> Risk | None:
    """The risk a call shows the user: its own ``risk`` argument when the action takes one (``confirm``
    does), else the tool's registered risk. One source of truth for the card and the call."""
    if "risk" in spec.input_schema.get("properties", {}):
        own = arguments.get("risk")
        if isinstance(own, str) and own in RISKS:
            return cast(Risk, own)
    return tool.definition.risk


def split_arguments(definition: ToolDefinition, flat: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Split the model's flat arguments into ``(action, arguments)`` for a tool call."""
    if definition.type == "action":
        return None, dict(flat)
    rest = dict(flat)
    action = rest.pop("action", None)
    return (action if isinstance(action, str) else None), rest
