"""The nanobot adapter (``pip install "lineup-plugin[nanobot]"``): :mod:`.tools` (the nanobot tools, entry-point
group ``nanobot.tools``), :mod:`.runtime` (:class:`~.runtime.NanobotRuntime`, a call awaited by a nanobot turn)
and :mod:`.compat` (every use of nanobot, one named function each)."""
