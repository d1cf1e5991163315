"""The Hermes Agent runtime adapter, split by job.

- :mod:`.install` — what the plugin's ``register(ctx)`` runs: tools, hooks, ``/lineup``, platform;
  :func:`~.install.installed` is this process's :class:`~.runtime.HermesRuntime`;
- :mod:`.runtime` — :class:`~.runtime.HermesRuntime`, with one small strategy per Hermes host
  (gateway, interactive CLI, attached agent), and its runtime-neutral
  :class:`~lineup_plugin.runtime.service.LineUpService`;
- :mod:`.hooks` — the session hooks and the ``/lineup`` command;
- :mod:`.approval` — the interactive CLI's approval prompt raced by an App card;
- :mod:`.platform` — the App as the ``lineup`` gateway platform (imported by the gateway only);
- :mod:`.common` — names, LineUp's config section, clarify and approval as cards;
- :mod:`.compat` — every use of Hermes internals, one named function each.
"""
