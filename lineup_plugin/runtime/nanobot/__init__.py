"""The nanobot adapter (``pip install "lineup-plugin[nanobot]"``), split by job.

- :mod:`.tools` — the nanobot tools (entry-point group ``nanobot.tools``): the built-in cards and
  the ``lineup`` dispatcher;
- :mod:`.runtime` — :class:`~.runtime.NanobotRuntime` and its
  :class:`~lineup_plugin.runtime.service.LineUpService`: a call awaited by a nanobot turn, cancelled
  by ``/stop`` or the App's stop button;
- :mod:`.compat` — every use of nanobot, one named function each.
"""
