"""Take the streaming and image screenshots in docs/ with the real direct server, hub and headless Chromium.

Run from the repository root: ``.venv/bin/python docs/media_screenshots.py``. It writes
``docs/streaming.png`` (an agent reply half written, growing in the App) and ``docs/image.png``
(a photo sent from the App, and a chart the agent sent back), both phone-sized.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import tempfile
from pathlib import Path

from playwright.async_api import Page, expect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docs.screenshots import DOCS, phone_app, screenshot_settings, user_says  # noqa: E402
from lineup_plugin import Hub, load_registry  # noqa: E402
from lineup_plugin.media import MediaStore  # noqa: E402

#: draws a picture on a canvas in the page and returns it as a base64 PNG
DRAW = """([kind, width, height]) => {
  const canvas = document.createElement("canvas");
  canvas.width = width; canvas.height = height;
  const g = canvas.getContext("2d");
  if (kind === "photo") {
    const sky = g.createLinearGradient(0, 0, 0, height);
    sky.addColorStop(0, "#f7b267"); sky.addColorStop(1, "#f4845f");
    g.fillStyle = sky; g.fillRect(0, 0, width, height);
    g.fillStyle = "#fff3b0"; g.beginPath(); g.arc(width * 0.7, height * 0.45, 40, 0, 7); g.fill();
    g.fillStyle = "#355070"; g.beginPath(); g.moveTo(0, height);
    g.lineTo(width * 0.3, height * 0.5); g.lineTo(width * 0.55, height * 0.8);
    g.lineTo(width * 0.8, height * 0.55); g.lineTo(width, height); g.fill();
  } else {
    g.fillStyle = "#ffffff"; g.fillRect(0, 0, width, height);
    const bars = [42, 55, 61, 48, 73, 88];
    bars.forEach((value, i) => {
      g.fillStyle = i === bars.length - 1 ? "#2f6fed" : "#9db7f5";
      g.fillRect(24 + i * 52, height - 24 - value * 2, 36, value * 2);
    });
    g.fillStyle = "#1b1e24"; g.font = "16px sans-serif"; g.fillText("Weekly sign-ups", 24, 28);
  }
  return canvas.toDataURL("image/png").split(",")[1];
}"""


async def picture(page: Page, kind: str, width: int, height: int) -> bytes:
    return base64.b64decode(await page.evaluate(DRAW, [kind, width, height]))


async def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        settings = screenshot_settings(data)
        hub = Hub(load_registry(load_entrypoints=False), agent_id="hermes", media=MediaStore.from_settings(settings))
        async with phone_app(hub, settings) as page:
            await user_says(page, "Why did the nightly build fail?")
            await hub.set_status("thinking")
            reply = "The nightly build failed in the integration tests: the payment service timed out"
            await hub.stream_text("m-stream", reply[:40])
            await hub.stream_text("m-stream", reply)
            await expect(page.locator('.msg[data-message-id="m-stream"]')).to_have_text(reply)
            await page.screenshot(path=DOCS / "streaming.png")
            await hub.send_text(reply + " after 30 s. A retry passed.", message_id="m-stream")
            await hub.set_status("idle")

            photo = await picture(page, "photo", 360, 240)
            await page.locator("#photo").set_input_files(
                {"name": "sunset.png", "mimeType": "image/png", "buffer": photo}
            )
            await page.get_by_label("Message to the agent").fill("Use this as the banner, and show me the sign-ups.")
            await page.keyboard.press("Enter")
            await page.get_by_label("Message to the agent").blur()
            chart = await picture(page, "chart", 360, 240)
            await hub.send_file("Banner set. Here are the sign-ups:", chart, "signups.png", "image/png")
            await hub.send_file("", b"week,signups\n1,42\n2,55\n", "signups.csv", "text/csv")
            await expect(page.get_by_role("img", name="signups.png")).to_be_visible()
            await expect(page.get_by_role("img", name="sunset.png")).to_be_visible()
            await page.get_by_role("link", name="signups.csv").scroll_into_view_if_needed()
            await page.screenshot(path=DOCS / "image.png")


if __name__ == "__main__":
    asyncio.run(main())
