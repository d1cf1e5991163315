"""How App devices reach the hub: direct (:mod:`.direct`), relay over WuKongIM (:mod:`.wukongim`)
and in-memory (:mod:`.memory`). Each is a :class:`~lineup_plugin.ports.Transport`."""

from __future__ import annotations

from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..hub import Hub
    from ..ports import Transport


def transport_for(settings: Settings, hub: Hub, *, app_dir: Traversable | None = None) -> Transport:
    """The transport ``settings.effective_mode`` asks for, serving ``hub`` (not started yet).

    ``app_dir`` replaces the packaged App in direct mode (tests).
    """
    if settings.effective_mode == "relay":
        from .wukongim.relay import Relay

        assert settings.wukongim is not None
        return Relay(settings.wukongim, hub)
    from .direct.server import DirectServer

    return DirectServer.from_settings(hub, settings, app_dir=app_dir)
