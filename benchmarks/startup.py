"""What the plugin adds to a Hermes start: fresh interpreters, with and without LineUp enabled.

A Hermes start here is ``import run_agent`` (which imports ``model_tools`` and so runs Hermes'
plugin discovery, calling every enabled plugin's ``register(ctx)``), in a ``HERMES_HOME`` whose
``config.yaml`` enables LineUp or not. Inside the LineUp runs, Hermes' own ``_load_plugin`` is
timed for LineUp (entry-point import + ``register(ctx)``). A third variant imports
``lineup_plugin.hermes`` and calls ``register`` with a minimal fake ctx (Hermes' config module
preloaded, as Hermes has it). The runs take turns; medians are quoted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .report import Row, verdict
from .rigs import TOKEN, run_python
from .stats import median

HERMES_START = """
import json, sys, time
if sys.argv[1:] == ["cli"]:
    import hermes_cli.commands  # the interactive CLI has it (and prompt_toolkit) loaded before plugins
start = time.perf_counter()
import hermes_cli.plugins as plugins
spent = {}
load = plugins.PluginManager._load_plugin
def timed(self, manifest):
    began = time.perf_counter()
    try:
        return load(self, manifest)
    finally:
        spent[manifest.key or manifest.name] = time.perf_counter() - began
plugins.PluginManager._load_plugin = timed
import run_agent
total = time.perf_counter() - start
loaded = plugins.get_plugin_manager()._plugins.get("lineup")
ok = loaded is not None and loaded.enabled and not loaded.error
print(json.dumps({"total": total, "lineup": spent.get("lineup"), "ok": ok, "modules": len(sys.modules)}))
"""

FAKE_CTX = """
import json, sys, time
import hermes_cli.config
class Ctx:
    def __init__(self):
        self.tools = []
    def register_tool(self, name, toolset, schema, handler, **options):
        self.tools.append(name)
    def register_hook(self, name, callback): pass
    def register_command(self, name, handler, **options): pass
    def register_platform(self, **options): pass
    def inject_message(self, content, role="user"): return False
ctx = Ctx()
before = len(sys.modules)
start = time.perf_counter()
import lineup_plugin.hermes
lineup_plugin.hermes.register(ctx)
took = time.perf_counter() - start
print(json.dumps({"total": took, "tools": len(ctx.tools), "modules": len(sys.modules) - before}))
"""


@dataclass
class Results:
    """Seconds per run, by variant."""

    without: list[float] = field(default_factory=list)
    with_lineup: list[float] = field(default_factory=list)
    load_plugin: list[float] = field(default_factory=list)
    load_plugin_cli: list[float] = field(default_factory=list)
    fake_ctx: list[float] = field(default_factory=list)
    extra_modules: int = 0
    tools: int = 0


def hermes_home(base: Path, enabled: bool) -> Path:
    """A HERMES_HOME whose config.yaml enables LineUp or not."""
    home = base / ("hermes-on" if enabled else "hermes-off")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(f"plugins:\n  enabled: [{'lineup' if enabled else ''}]\n", encoding="utf-8")
    return home


async def measure(data_dir: Path, runs: int) -> Results:
    """``runs`` interleaved starts of each variant."""
    results = Results()
    base = {**os.environ, "LINEUP_TOKEN": TOKEN, "LINEUP_DATA_DIR": str(data_dir / "lineup"), "LINEUP_PORT": "0"}
    for run in range(runs):
        variants = ("without", "with", "cli", "fake")
        for variant in variants if run % 2 == 0 else reversed(variants):
            env = {**base, "HERMES_HOME": str(hermes_home(data_dir, variant != "without"))}
            out = await run_python(FAKE_CTX if variant == "fake" else HERMES_START, variant, env=env)
            if variant != "fake" and variant != "without" and not out["ok"]:
                raise RuntimeError("hermes did not load the lineup plugin")
            if variant == "without":
                results.without.append(out["total"])
            elif variant == "with":
                results.with_lineup.append(out["total"])
                results.load_plugin.append(out["lineup"])
            elif variant == "cli":
                results.load_plugin_cli.append(out["lineup"])
            else:
                results.fake_ctx.append(out["total"])
                results.extra_modules = int(out["modules"])
                results.tools = int(out["tools"])
    return results


def rows(results: Results) -> list[Row]:
    """The table rows of the start-up section."""
    section = "6 Hermes start"
    without, with_lineup = median(results.without) * 1000, median(results.with_lineup) * 1000
    in_situ = median(results.load_plugin) * 1000
    in_cli = median(results.load_plugin_cli) * 1000
    fake = median(results.fake_ctx) * 1000
    runs = len(results.without)
    return [
        Row(
            section, "Hermes start without LineUp (import run_agent)", f"{without:,.0f} ms", f"median of {runs}", "", ""
        ),
        Row(
            section,
            "Hermes start with LineUp enabled",
            f"{with_lineup:,.0f} ms",
            f"+{with_lineup - without:,.0f} ms over without",
            "",
            "",
        ),
        Row(
            section,
            "LineUp import + register(ctx) inside that start",
            f"{in_situ:,.0f} ms",
            "Hermes' _load_plugin for lineup",
            "≤ 50 ms",
            verdict(in_situ <= 50),
        ),
        Row(
            section,
            "the same with Hermes' slash-command module already loaded (as in the CLI)",
            f"{in_cli:,.0f} ms",
            "ctx.register_command imports hermes_cli.commands (prompt_toolkit) otherwise",
            "≤ 50 ms",
            verdict(in_cli <= 50),
        ),
        Row(
            section,
            "import lineup_plugin.hermes + register(fake ctx)",
            f"{fake:,.0f} ms",
            f"fresh interpreter; {results.tools} tools, +{results.extra_modules} modules",
            "",
            "",
        ),
    ]
