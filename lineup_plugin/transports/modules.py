"""The App's ES modules joined into one script, in dependency order, by the App's own rules.

The direct server sends the App as one script (one request instead of one per module, see
:mod:`.direct.static`), and its service worker too (as the relay's ``lineup app export`` writes it);
an MCP Apps host card page inlines one (:mod:`lineup_plugin.runtime.mcp.view`).
Each module becomes a function scope that returns its exports. The App's modules keep to what
this understands — ``import { a, b as c } from "./x.js";`` and ``import x from "./x.js";`` on one
line, ``export`` before a top-level ``function``, ``class``, ``const`` or ``let``, and ``export
default`` — and anything else raises :class:`~lineup_plugin.errors.RendererError`. A dynamic
``import("./x.js")`` inside a function is left as it is: the browser fetches that module (and
what it imports) as a module of its own when it runs, relative to the script's address.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable

from ..errors import RendererError

_IMPORT_NAMES = re.compile(r'^import \{([^}]*)\} from "([^"]+)";[ \t]*$', re.M)
_IMPORT_DEFAULT = re.compile(r'^import ([A-Za-z_$][\w$]*) from "([^"]+)";[ \t]*$', re.M)
_EXPORT = re.compile(r"^export (async function\*?|function\*?|class|const|let) ([A-Za-z_$][\w$]*)", re.M)
_EXPORT_DEFAULT = re.compile(r"^export default ", re.M)
_LEFT_OVER = re.compile(r"^(import|export)\b.*$", re.M)


def imports_anything(source: str) -> bool:
    """Whether module ``source`` has a static ``import`` line this bundler would follow."""
    return bool(_IMPORT_NAMES.search(source) or _IMPORT_DEFAULT.search(source))


def bundle(read: Callable[[str], str], entry: str) -> str:
    """One script of ``entry`` and every module it imports (paths relative to the App's directory).

    ``read(path)`` gives a module's source. Raises RendererError on a module this bundler does
    not understand, or an import cycle.
    """
    done: dict[str, str] = {}
    visiting: list[str] = []

    def visit(path: str) -> None:
        if path in done:
            return
        if path in visiting:
            raise RendererError(f"cannot bundle the App's modules: an import cycle through {path}")
        visiting.append(path)
        source = read(path)
        for match in (*_IMPORT_NAMES.finditer(source), *_IMPORT_DEFAULT.finditer(source)):
            visit(_resolve(path, match.group(2)))
        done[path] = _scope(path, source)
        visiting.pop()

    visit(entry)
    return "const __lineup = {};\n" + "\n".join(done.values())


def script(read: Callable[[str], str], entry: str) -> str:
    """:func:`bundle` of ``entry``, :func:`lean`, under a line that says what it is: the script as it is sent."""
    return f"// The LineUp App's modules joined into one script ({entry} and its imports).\n{lean(bundle(read, entry))}"


def _resolve(importer: str, specifier: str) -> str:
    if not specifier.startswith("./") and not specifier.startswith("../"):
        raise RendererError(f"{importer}: cannot bundle the import of {specifier!r} (only relative paths)")
    path = posixpath.normpath(posixpath.join(posixpath.dirname(importer), specifier))
    if path.startswith("../"):
        raise RendererError(f"{importer}: {specifier!r} is outside the App")
    return path


def _scope(path: str, source: str) -> str:
    """``source`` as ``__lineup["<path>"] = (() => { ...; return {exports}; })();``."""
    exports: list[str] = []

    def names(match: re.Match[str]) -> str:
        bound = [part.strip().replace(" as ", ": ") for part in match.group(1).split(",") if part.strip()]
        return f"const {{ {', '.join(bound)} }} = __lineup[{json.dumps(_resolve(path, match.group(2)))}];"

    def default(match: re.Match[str]) -> str:
        return f"const {match.group(1)} = __lineup[{json.dumps(_resolve(path, match.group(2)))}].default;"

    def declaration(match: re.Match[str]) -> str:
        exports.append(match.group(2))
        return f"{match.group(1)} {match.group(2)}"

    body = _IMPORT_NAMES.sub(names, source)
    body = _IMPORT_DEFAULT.sub(default, body)
    body = _EXPORT.sub(declaration, body)
    if len(_EXPORT_DEFAULT.findall(body)) > 1:
        raise RendererError(f"{path}: more than one export default")
    if _EXPORT_DEFAULT.search(body):
        body = _EXPORT_DEFAULT.sub("const __default = ", body)
        exports.append("default: __default")
    left = _LEFT_OVER.search(body)
    if left is not None:
        raise RendererError(f"{path}: cannot bundle {left.group(0)[:60]!r} for an MCP Apps host")
    return f"__lineup[{json.dumps(path)}] = (() => {{\n{body}\nreturn {{ {', '.join(exports)} }};\n}})();"


def lean(script: str) -> str:
    """``script`` without what only people read: whole-line comments, blank lines and indentation.

    A comment that shares its line with code stays, and so does every line of a template literal
    (a line with an odd number of unescaped backticks opens or closes one): what runs is unchanged,
    and a phone on a slow network gets a third less (compressed).
    """
    out: list[str] = []
    in_block = in_template = False
    for line in script.split("\n"):
        if in_template:
            out.append(line)
            in_template = _backticks(line) % 2 == 0
            continue
        text = line.strip()
        if in_block:
            end = text.find("*/")
            if end < 0:
                continue
            in_block = False
            text = text[end + 2 :].strip()
        if text.startswith("/*"):
            end = text.find("*/", 2)
            if end < 0:
                in_block = True
                continue
            if not text[end + 2 :].strip():
                continue
        if not text or text.startswith("//"):
            continue
        out.append(text)
        in_template = _backticks(text) % 2 == 1
    return "\n".join(out) + "\n"


def _backticks(line: str) -> int:
    """How many backticks of ``line`` are not escaped."""
    return len(re.findall(r"(?<!\\)`", line))
