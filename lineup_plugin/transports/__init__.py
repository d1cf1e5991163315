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

    ``app_dir`` replaces the packaged App in direct mode (tests). The relay seals envelopes for
    the devices paired in ``settings.data_dir`` unless ``wukongim.e2e`` is off.
    """
    from .direct.server import DirectServer

    mode = settings.effective_mode
    if mode == "direct":
        return DirectServer.from_settings(hub, settings, app_dir=app_dir)
    from .wukongim.pairing import Pairings
    from .wukongim.relay import Relay

    wk = settings.wukongim
    assert wk is not None
    pairings = Pairings(settings.data_dir, wk.uid, wk.app_uid) if wk.e2e else None
    relay = Relay(wk, hub, pairings=pairings)
    if mode == "relay":
        return relay
    from .both import DirectAndRelay

    return DirectAndRelay(DirectServer.from_settings(hub, settings, app_dir=app_dir), relay)
