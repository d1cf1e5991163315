"""A fast check of tool arguments against the simple JSON Schemas most tools have.

:func:`compile_schema` turns a schema into a predicate that answers True only when the instance
is valid under JSON Schema draft 2020-12 exactly as ``jsonschema.Draft202012Validator`` decides
(format is an annotation there too), for instances made of JSON's own types. It knows a subset
of the keywords (types, properties, required, additionalProperties, items, enum of strings,
length and size bounds, minimum and maximum (also exclusive), anyOf, and annotations); for a
schema using anything else it returns None. False means "not valid, or not sure": the caller then asks jsonschema, which
also words the error. So the predicate may only ever be too strict, never too lenient.

A schema it compiles is also a valid draft 2020-12 schema (the values of the keywords it knows
are checked as the meta-schema does), so the registry need not run jsonschema's meta-schema
check, which takes milliseconds per schema, on it.

Validating the same schema with jsonschema walks a tree of validator objects on every call
(~50 µs for a ``choice`` card); the compiled predicate takes a few microseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Predicate = Callable[[Any], bool]

#: keywords that never change whether an instance is valid (``format`` is not asserted by default),
#: with the type the meta-schema wants for their value
_ANNOTATIONS: dict[str, type | None] = {
    "title": str,
    "description": str,
    "$comment": str,
    "format": str,
    "examples": list,
    "deprecated": bool,
    "readOnly": bool,
    "writeOnly": bool,
    "default": None,
}
_TYPES: dict[str, Predicate] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


class _Unsupported(Exception):
    """The schema uses something the fast check does not know."""


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise _Unsupported
    return value


def _bound(value: Any) -> int | float:
    if type(value) not in (int, float):
        raise _Unsupported
    result: int | float = value
    return result


def _compile(schema: Any) -> Predicate:
    """The predicate of one (sub)schema; raises _Unsupported."""
    if schema is True:
        return lambda _: True
    if schema is False or not isinstance(schema, dict):
        raise _Unsupported
    checks: list[Predicate] = []
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS:
            wanted = _ANNOTATIONS[keyword]
            if wanted is not None and type(value) is not wanted:
                raise _Unsupported
            continue
        checks.append(_keyword(keyword, value, schema))
    if not checks:
        return lambda _: True
    if len(checks) == 1:
        return checks[0]

    def every(instance: Any) -> bool:
        for check in checks:  # noqa: SIM110 - a loop is ~2.5x faster than all(genexpr), and this runs per call
            if not check(instance):
                return False
        return True

    return every


def _keyword(keyword: str, value: Any, schema: dict[str, Any]) -> Predicate:
    if keyword == "type":
        names = [value] if type(value) is str else value
        if type(names) is not list or not names or not all(type(name) is str for name in names):
            raise _Unsupported
        if len(set(names)) != len(names) or not set(names) <= _TYPES.keys():
            raise _Unsupported
        tests = [_TYPES[name] for name in names]
        if len(tests) == 1:
            return tests[0]
        return lambda v: any(test(v) for test in tests)
    if keyword == "properties":
        if not isinstance(value, dict) or not all(type(name) is str for name in value):
            raise _Unsupported
        props = [(name, _compile(sub)) for name, sub in value.items()]

        def properties(v: Any) -> bool:
            if isinstance(v, dict):
                for name, ok in props:
                    if name in v and not ok(v[name]):
                        return False
            return True

        return properties
    if keyword == "required":
        if type(value) is not list or not all(type(name) is str for name in value) or len(set(value)) != len(value):
            raise _Unsupported
        names = frozenset(value)
        return lambda v: not isinstance(v, dict) or names.issubset(v)
    if keyword == "additionalProperties":
        known = schema.get("properties", {})
        if not isinstance(known, dict):
            raise _Unsupported
        extra = _compile(value) if value is not False else None
        if extra is None:
            return lambda v: not isinstance(v, dict) or all(name in known for name in v)
        return lambda v: not isinstance(v, dict) or all(name in known or extra(item) for name, item in v.items())
    if keyword == "items":
        each = _compile(value)

        def items(v: Any) -> bool:
            if isinstance(v, list):
                for item in v:
                    if not each(item):
                        return False
            return True

        return items
    if keyword == "enum":
        if not isinstance(value, list) or not all(type(item) is str for item in value):
            raise _Unsupported
        allowed = frozenset(value)
        return lambda v: type(v) is str and v in allowed
    if keyword in ("minItems", "maxItems"):
        size = _count(value)
        if keyword == "minItems":
            return lambda v: not isinstance(v, list) or len(v) >= size
        return lambda v: not isinstance(v, list) or len(v) <= size
    if keyword in ("minLength", "maxLength"):
        length = _count(value)
        if keyword == "minLength":
            return lambda v: not isinstance(v, str) or len(v) >= length
        return lambda v: not isinstance(v, str) or len(v) <= length
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        limit = _bound(value)
        number = _TYPES["number"]
        if keyword == "minimum":
            return lambda v: not number(v) or (type(v) in (int, float) and v >= limit)
        if keyword == "maximum":
            return lambda v: not number(v) or (type(v) in (int, float) and v <= limit)
        if keyword == "exclusiveMinimum":
            return lambda v: not number(v) or (type(v) in (int, float) and v > limit)
        return lambda v: not number(v) or (type(v) in (int, float) and v < limit)
    if keyword == "anyOf":
        if type(value) is not list or not value:
            raise _Unsupported
        options = [_compile(sub) for sub in value]
        return lambda v: any(option(v) for option in options)
    raise _Unsupported


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of JSON's own types only (exactly: no subclasses)."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return True
    if kind is dict:
        for key, item in value.items():  # noqa: SIM110 - as in every()
            if type(key) is not str or not _plain(item):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110 - as in every()
            if not _plain(item):
                return False
        return True
    return False


def compile_schema(schema: Any) -> Predicate | None:
    """A predicate that is True only for instances valid under ``schema``; None if it cannot tell.

    Instances holding anything but JSON's own types (e.g. a tuple, a Decimal) get False.
    """
    try:
        check = _compile(schema)
    except (_Unsupported, RecursionError, TypeError):
        return None

    def predicate(instance: Any) -> bool:
        try:
            return _plain(instance) and check(instance)
        except RecursionError:
            return False

    return predicate
