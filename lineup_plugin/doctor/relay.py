"""The check of the relay: the WuKongIM server answers ``GET /route`` and takes the agent's login."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ..errors import RelayAuthError, RelayError, RelayTimeoutError
from ..runtime.lock import Owner
from .context import WHERE, Context, needs_settings
from .findings import Finding, failed, passed, skipped

if TYPE_CHECKING:
    from ..config.settings import Settings, WuKongIMSettings


@needs_settings("relay")
def check_relay(ctx: Context, settings: Settings) -> Finding:
    """The WuKongIM server answers ``GET /route`` and accepts the agent's login."""
    relay = settings.wukongim
    if relay is None:
        return skipped("relay", "no relay settings (wukongim): the App connects directly")
    if settings.effective_mode == "direct":
        return skipped("relay", "mode is direct: the relay settings (wukongim) are not used")
    owner = ctx.owner if settings.effective_mode in ("relay", "both") else None
    return asyncio.run(_check_relay(relay, ctx.timeout, owner))


async def _check_relay(relay: WuKongIMSettings, timeout: float, owner: Owner | None) -> Finding:
    import httpx

    from ..transports.wukongim.client import ClientOptions, ImSession, Timers
    from ..transports.wukongim.proto import DeviceFlag
    from ..transports.wukongim.relay import WuKongIMApi

    headers = {"token": relay.manager_token} if relay.manager_token else {}
    try:
        async with asyncio.timeout(timeout), httpx.AsyncClient(base_url=relay.api_url, headers=headers) as http:
            routed = await WuKongIMApi(http).route(relay.uid, secure=relay.api_url.startswith("https:"))
    except TimeoutError:
        return failed("relay", f"{relay.api_url} did not answer GET /route within {timeout:g} s", _API_FIX)
    except RelayAuthError as exc:
        return failed("relay", str(exc), f"set the server's manager token in {WHERE.format('WUKONGIM_MANAGER_TOKEN')}")
    except RelayError as exc:
        return failed("relay", str(exc), _API_FIX)
    address = relay.ws_url or routed
    done = f"GET /route answered ({routed})"
    if owner is not None:
        return passed(
            "relay", f"{done}; login not tried: {owner} serves the relay with it (a second login may kick it)"
        )
    if relay.token is None and relay.manager_token:
        return passed("relay", f"{done}; login not tried: the agent registers its own token at start (manager_token)")
    options = ClientOptions(
        uid=relay.uid,
        token=relay.token or "",
        device_flag=DeviceFlag(relay.device_flag),
        protocol_version=relay.protocol_version,
        timers=Timers(connect_timeout=timeout),
    )
    try:
        async with asyncio.timeout(2 * timeout):  # connecting, then the CONNACK: each within timeout
            session = await ImSession.open(address, options)
    except TimeoutError:
        return failed("relay", f"{address} did not take the login within {2 * timeout:g} s", _LOGIN_FIX.format(relay))
    except (RelayAuthError, RelayTimeoutError) as exc:
        return failed("relay", str(exc), _LOGIN_FIX.format(relay))
    except RelayError as exc:
        if isinstance(exc.__cause__, EOFError):  # closed before CONNACK: what WuKongIM may do with a bad token
            return failed("relay", str(exc), _LOGIN_FIX.format(relay))
        return failed("relay", str(exc), f"check wukongim.ws_url: the server's WebSocket address ({address})")
    with contextlib.suppress(Exception):
        async with asyncio.timeout(timeout):
            await session.close()
    return passed("relay", f"{done}; {relay.uid!r} logged in at {address}")


_LOGIN_FIX = (
    "check wukongim.uid and wukongim.token: the server must hold that token for uid {0.uid!r} "
    "and device_flag {0.device_flag}"
)
_API_FIX = "check wukongim.api_url: the WuKongIM HTTP API (port 5001 by default) must be reachable from here"
