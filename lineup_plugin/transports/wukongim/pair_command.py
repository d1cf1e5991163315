"""What ``lineup pair`` and ``lineup app export`` do (the CLI parses; this acts).

* :func:`pairing_status`: who is paired (never a secret);
* :func:`pair_link`: pairs a new App device with a key pair made here and returns the link that
  opens the App (an exported copy on an HTTPS host) already paired; the fragment holds the keys;
* :func:`revoke`: drops every paired device and the agent key, and registers a new App token with
  WuKongIM (with the manager token), so a revoked App can neither log in nor be read;
* :func:`export_app`: writes the App's static files for a static host.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import httpx

from lineup_plugin.config.settings import Settings, WuKongIMSettings
from lineup_plugin.errors import ConfigError

from ..app_files import SERVICE_WORKER, packaged_app, service_worker
from .e2e import b64url
from .pairing import Pairings
from .relay import APP_DEVICE_FLAG, WuKongIMApi


def _relay_settings(settings: Settings) -> WuKongIMSettings:
    if settings.wukongim is None or not settings.wukongim.e2e:
        raise ConfigError(
            "pairing needs the relay: set the wukongim settings (LINEUP_WUKONGIM_API_URL, _UID, _APP_UID, "
            "_MANAGER_TOKEN...) with e2e on, and mode both to keep the direct server too"
        )
    return settings.wukongim


def pairings_of(settings: Settings) -> Pairings:
    """The pairing file of ``settings``' data dir."""
    wk = _relay_settings(settings)
    return Pairings(settings.data_dir, wk.uid, wk.app_uid)


def pairing_status(settings: Settings) -> str:
    """Lines for a person: the App user, its devices and when they paired (no token, no key)."""
    wk = _relay_settings(settings)
    state = pairings_of(settings).state
    lines = [f"relay: WuKongIM {wk.api_url}, agent {wk.uid!r}, App user {wk.app_uid!r}"]
    if state is None or not state.devices:
        lines.append("no App device is paired: open the App on the LAN (it pairs by itself), or use --link URL")
    for device in sorted(state.devices.values(), key=lambda d: d.created) if state else ():
        when = dt.datetime.fromtimestamp(device.created, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines.append(f"paired: {device.pairing_id} since {when}")
    if state is not None and state.revoked:
        lines.append(f"revoked: {len(state.revoked)} earlier pairing(s)")
    return "\n".join(lines)


async def _with_api(wk: WuKongIMSettings) -> tuple[httpx.AsyncClient, WuKongIMApi]:
    headers = {"token": wk.manager_token} if wk.manager_token else {}
    http = httpx.AsyncClient(base_url=wk.api_url, headers=headers, timeout=10)
    return http, WuKongIMApi(http)


async def pair_link(settings: Settings, app_url: str) -> str:
    """Pair a new device and return ``app_url`` with the pairing in its fragment (``#pair=...``)."""
    if not app_url.startswith(("https://", "http://")):
        raise ConfigError(f"--link: expected the address of the exported App (https://...), not {app_url!r}")
    wk = _relay_settings(settings)
    pairings = pairings_of(settings)
    state, device, secret = pairings.pair_link()
    http, api = await _with_api(wk)
    async with http:
        if wk.manager_token:
            await api.set_token(wk.app_uid, state.app_token, APP_DEVICE_FLAG)
        ws = wk.app_ws_url or wk.ws_url or await api.route(wk.app_uid, secure=app_url.startswith("https:"))
    offer: dict[str, Any] = {**pairings.offer(state, device, ws, wk.content_type), "secret": secret}
    fragment = b64url(json.dumps(offer, separators=(",", ":")).encode())
    return f"{app_url.split('#', 1)[0]}#pair={fragment}"


async def revoke(settings: Settings) -> str:
    """Revoke every pairing; what happened, for a person."""
    wk = _relay_settings(settings)
    pairings = pairings_of(settings)
    old = pairings.state
    state = pairings.revoke()
    count = len(old.devices) if old else 0
    if not wk.manager_token:
        return (
            f"revoked {count} pairing(s); no manager_token, so the App user's WuKongIM token is unchanged "
            "(the agent refuses and tells a revoked App; set manager_token to refuse its login too)"
        )
    http, api = await _with_api(wk)
    async with http:
        await api.set_token(wk.app_uid, state.app_token, APP_DEVICE_FLAG)
    return f"revoked {count} pairing(s); the App user {wk.app_uid!r} has a new WuKongIM token"


def export_app(target: Path, source: Traversable | None = None) -> int:
    """Copy the App's static files into ``target`` (created; must be empty or absent); how many files.

    The service worker is written joined with the modules it imports, as the direct server sends it
    (a service worker runs as a classic script).
    """
    root = source if source is not None else packaged_app()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{target} exists and is not an empty directory")
    count = 0
    worker = service_worker(root)

    def copy(node: Traversable, into: Path) -> None:
        nonlocal count
        into.mkdir(parents=True, exist_ok=True)
        for child in node.iterdir():
            if child.name.startswith((".", "__")):
                continue
            if child.is_dir():
                copy(child, into / child.name)
            elif worker is not None and into == target and child.name == SERVICE_WORKER:
                (into / child.name).write_bytes(worker)
                count += 1
            else:
                with child.open("rb") as src, open(into / child.name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                count += 1

    copy(root, target)
    return count
