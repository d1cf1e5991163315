"""The Hermes Agent plugin entry point (entry-point group ``hermes_agent.plugins``, name ``lineup``).

Enable it in Hermes' ``config.yaml``::

    plugins:
      enabled: [lineup]
      entries:
        lineup:            # LineUp's settings (see lineup_plugin.config.settings.Settings)
          port: 9527

Hermes imports this module and calls :func:`register` in every process it starts. Everything
happens in :mod:`lineup_plugin.runtime.hermes` (:func:`~lineup_plugin.runtime.hermes.install.install`);
this module stays small so that importing it costs nothing until Hermes actually enables the plugin.
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import ConfigError


def register(ctx: Any) -> None:
    """Hermes' plugin hook: register LineUp's tools, hooks, ``/lineup`` command and platform.

    A bad setting raises :class:`~lineup_plugin.errors.ConfigError` naming it: Hermes then logs
    "Failed to load plugin 'lineup': …" (``~/.hermes/logs/errors.log``) and loads nothing of
    LineUp; on a terminal the reason is also printed.
    """
    from .runtime.hermes.install import install

    try:
        install(ctx)
    except ConfigError as exc:
        if sys.stderr.isatty():
            print(f"LineUp plugin not loaded: {exc}", file=sys.stderr)
        raise
