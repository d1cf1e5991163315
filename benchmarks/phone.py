"""Time to the first card on a phone network: real headless Chromium, CDP network throttling.

A phone-sized page (390×844) follows the agent's link while a ``confirm`` call waits; the clock
runs from navigation until the card is on screen. Three runs side by side: a new device on an
unthrottled loopback, a new device on a slow phone network (400 ms round trip, 400 kbit/s each way,
Chrome DevTools Protocol ``Network.emulateNetworkConditions``), and a reload of that device on the
same network (its cache kept). Bytes are what Chromium reports received before the card was drawn
(``encodedDataLength``: headers and compressed bodies, the WebSocket's frames included).

``python -m benchmarks --only phone``; needs Debian's Chromium and Playwright (the end-to-end
tests' browser), else the section says it was not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.transports.direct.server import DirectServer

from .report import Row, verdict

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, CDPSession

#: the phone network of issue 20: 400 ms round trip, 400 kbit/s down and up
PHONE_NETWORK: dict[str, Any] = {
    "offline": False,
    "latency": 400,
    "downloadThroughput": 400_000 / 8,
    "uploadThroughput": 400_000 / 8,
}
#: what the first card may take on that network, and the bytes before it
TARGET_SECONDS = 3.0
TARGET_BYTES = 100_000
#: what a reload may transfer
TARGET_RELOAD_BYTES = 10_000
TOKEN = "bench-token-0123456789abcdef"
#: the loads measured, in the table's order
LOADS = ("unthrottled, new device", "phone network, new device", "phone network, reload")


@dataclass
class Load:
    """One page load until the first card: seconds, bytes received, HTTP requests made."""

    seconds: float
    bytes: int
    requests: int
    urls: list[str] = field(default_factory=list)


class Meter:
    """Counts the requests and received bytes a CDP session reports."""

    def __init__(self, cdp: CDPSession) -> None:
        self.bytes = 0
        self.urls: list[str] = []
        self._frames = 0
        cdp.on("Network.requestWillBeSent", self._sent)
        cdp.on("Network.loadingFinished", self._finished)
        cdp.on("Network.webSocketFrameReceived", self._frame)

    def _sent(self, event: dict[str, Any]) -> None:
        self.urls.append(str(event["request"]["url"]))

    def _finished(self, event: dict[str, Any]) -> None:
        self.bytes += int(event.get("encodedDataLength", 0))

    def _frame(self, event: dict[str, Any]) -> None:
        self.bytes += len(str(event["response"].get("payloadData", "")))


async def first_card(context: BrowserContext, url: str, network: dict[str, Any] | None, *, reload: bool) -> Load:
    """Open ``url`` (or reload the context's page) and time it until the waiting card shows."""
    page = context.pages[0] if reload else await context.new_page()
    cdp = await context.new_cdp_session(page)
    await cdp.send("Network.enable")
    if network is not None:
        await cdp.send("Network.emulateNetworkConditions", network)
    meter = Meter(cdp)
    started = time.perf_counter()
    if reload:
        await page.reload(wait_until="commit")
    else:
        await page.goto(url, wait_until="commit")
    await page.locator("article.card").first.wait_for(state="visible", timeout=120_000)
    seconds = time.perf_counter() - started
    await cdp.detach()
    return Load(seconds, meter.bytes, sum(1 for u in meter.urls if u.startswith("http")), meter.urls)


async def measure() -> dict[str, Load] | None:
    """The three loads (unthrottled, phone network, phone network reload), or None without Chromium."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        return None
    from tests.e2e.browser import CHROMIUM, PHONE, launch

    if not Path(CHROMIUM).exists():
        return None
    loads: dict[str, Load] = {}
    with tempfile.TemporaryDirectory(prefix="lineup-phone-") as tmp:
        settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=Path(tmp), store="memory")
        hub = Hub(load_registry(load_entrypoints=False))
        server = DirectServer.from_settings(hub, settings)
        await server.start()
        call: asyncio.Task[object] | None = None
        try:
            async with async_playwright() as playwright:
                browser = await launch(playwright)
                try:
                    # a device the question reaches first (a call with no App attached fails at once)
                    first = await (await browser.new_context(**PHONE)).new_page()
                    await first.goto(server.connect_link)
                    await hub.wait_for_device()
                    call = asyncio.create_task(hub.call("confirm", {"message": "Deploy to production?"}))
                    await first.locator("article.card").wait_for(state="visible")
                    fresh = await browser.new_context(**PHONE)
                    loads["unthrottled, new device"] = await first_card(fresh, server.connect_link, None, reload=False)
                    phone = await browser.new_context(**PHONE)
                    loads["phone network, new device"] = await first_card(
                        phone, server.connect_link, PHONE_NETWORK, reload=False
                    )
                    loads["phone network, reload"] = await first_card(phone, "", PHONE_NETWORK, reload=True)
                finally:
                    await browser.close()
        finally:
            if call is not None:
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call
            await hub.cancel_all("the benchmark ended")
            await server.close()
    return loads


def rows(loads: dict[str, Load] | None) -> list[Row]:
    """The table rows: each load's time, bytes and requests, the phone ones against their targets."""
    if loads is None:
        return [Row("phone", "first card (Chromium not installed)", "not run", "", "", "")]
    base = loads[LOADS[0]]
    out: list[Row] = []
    for name, load in loads.items():
        compared = "" if load is base else f"{load.seconds / base.seconds:.1f}× unthrottled ({base.seconds:.2f} s)"
        if name == "phone network, new device":
            target, met = (
                f"≤ {TARGET_SECONDS:.0f} s, ≤ {TARGET_BYTES // 1000} KB",
                (load.seconds <= TARGET_SECONDS and load.bytes <= TARGET_BYTES),
            )
        elif name == "phone network, reload":
            target, met = f"≤ {TARGET_RELOAD_BYTES // 1000} KB", load.bytes <= TARGET_RELOAD_BYTES
        else:
            target, met = "", True
        value = f"{load.seconds:.2f} s, {load.bytes / 1000:.1f} KB, {load.requests} requests"
        out.append(Row("phone", f"first card: {name}", value, compared, target, verdict(met) if target else ""))
    return out


if __name__ == "__main__":
    result = asyncio.run(measure())
    for row in rows(result):
        print(f"{row.name}: {row.value}  {row.comparison}  {row.target} {row.verdict}")
    if result:
        for url in result["phone network, new device"].urls:
            print("   ", url)
