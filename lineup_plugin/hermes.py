"""The Hermes Agent plugin entry point (entry-point group ``hermes_agent.plugins``, name ``lineup``).

Enable it in Hermes' ``config.yaml``::

    plugins:
      enabled: [lineup]
      entries:
        lineup:            # LineUp's settings (see lineup_plugin.config.Settings)
          port: 9527

Hermes imports this module and calls :func:`register` in every process it starts. Everything
happens in :mod:`lineup_plugin.runtime.hermes`; this module stays small so that importing it
costs nothing until Hermes actually enables the plugin.
"""

from __future__ import annotations

from typing import Any


def register(ctx: Any) -> None:
    """Hermes' plugin hook: register LineUp's tools, hooks, ``/lineup`` command and platform."""
    from .runtime.hermes import install

    install(ctx)
