"""Take docs/text-fallback.png: a conversation with a WuKongIM client that shows only text.

Run from the repository root: ``.venv/bin/python docs/text_fallback.py``. It runs the real hub
and relay against the fake WuKongIM server (``tests/fakes/wukongim.py``), with the App user on a
plain-text client (``tests/fakes/textuser.py``): the agent asks a choice, a confirm and a form,
the user answers in text (one reply does not fit and is asked again). The conversation is read
back from what the server stored, drawn as a chat page and photographed in headless Chromium,
phone-sized. ``tests/transports/test_text_fallback_doc.py`` runs the same conversation and
``tests/e2e/test_text_fallback_picture.py`` the drawing.
"""

from __future__ import annotations

import asyncio
import html
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lineup_plugin.config.settings import WuKongIMSettings  # noqa: E402
from lineup_plugin.hub import Hub  # noqa: E402
from lineup_plugin.plugins import load_registry  # noqa: E402
from lineup_plugin.protocol.messages import ToolResult  # noqa: E402
from lineup_plugin.transports.wukongim.relay import Relay  # noqa: E402
from tests.fakes.textuser import FAST, TextUser, text_user  # noqa: E402
from tests.fakes.wukongim import FakeWuKongIM  # noqa: E402

if TYPE_CHECKING:
    from playwright.async_api import Browser

DOCS = ROOT / "docs"
AGENT, USER = "hermes", "alice"
NOTES = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "title": "Title", "description": "one line for the changelog"},
        "notify": {"type": "boolean", "title": "Tell the team on #releases"},
    },
    "required": ["title", "notify"],
}

#: one line of the chat: who said it ("agent" or "user") and what
Line = tuple[str, str]


async def _converse(hub: Hub, user: TextUser) -> list[ToolResult]:
    """The scripted conversation: the agent's side runs in tasks, the user answers what they read."""
    await user.say("Ship build 1.4.2, please.")
    await hub.send_text("Build 1.4.2 passed all 312 checks.")
    await user.read()
    deploy = {"question": "Deploy build 1.4.2 to which environment?", "options": ["test", "staging", "production"]}
    choice = asyncio.create_task(hub.agent_call("choice", deploy))
    await user.read()
    await user.say("prod")  # does not fit: asked again
    await user.read()
    await user.say("3")
    await user.read()
    results = [await choice]
    approval = {
        "message": "Roll out 1.4.2 to production?",
        "details": "kubectl rollout restart deploy/web",
        "risk": "system_permission",
    }
    confirm = asyncio.create_task(hub.agent_call("confirm", approval))
    await user.read()
    await user.say("yes")
    await user.read()
    results.append(await confirm)
    form = asyncio.create_task(hub.agent_call("input", {"prompt": "Release notes", "fields": NOTES}))
    await user.read()
    await user.say("Faster checkout on phones")
    await user.read()
    await user.say("yes")
    await user.read()
    results.append(await form)
    await hub.send_text("Done: 1.4.2 is live on production and the team was told.")
    await user.read()
    return results


async def conversation() -> tuple[list[Line], list[ToolResult]]:
    """Run the conversation; return it as the server stored it, and the results the agent got."""
    hub = Hub(load_registry(load_entrypoints=False), agent_id=AGENT)
    async with FakeWuKongIM() as server:
        settings = WuKongIMSettings(api_url=server.api_url, ws_url=server.ws_url, uid=AGENT, app_uid=USER)
        async with text_user(server, USER, AGENT) as user, Relay(settings, hub, timers=FAST) as relay:
            await asyncio.wait_for(relay.connected.wait(), 10)
            await asyncio.wait_for(hub.wait_for_device(), 10)
            results = await asyncio.wait_for(_converse(hub, user), 30)
        lines: list[Line] = []
        for message in server.messages:
            content = json.loads(message.payload)
            assert content["type"] == 1, f"the text client was sent content type {content['type']}"
            lines.append(("user" if message.from_uid == USER else "agent", content["content"]))
    return lines, results


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>LineUp cards as text</title><style>
  body {{ margin: 0; font: 15px/1.4 system-ui, sans-serif; background: #ededed; color: #111; }}
  header {{ position: sticky; top: 0; background: #f7f7f7; border-bottom: 1px solid #d8d8d8;
           padding: 12px; text-align: center; font-weight: 600; }}
  header small {{ display: block; font-weight: 400; color: #777; font-size: 12px; }}
  main {{ display: flex; flex-direction: column; gap: 10px; padding: 12px; }}
  .msg {{ max-width: 80%; padding: 8px 11px; border-radius: 6px; white-space: pre-wrap; overflow-wrap: anywhere; }}
  .agent {{ align-self: flex-start; background: #fff; }}
  .user {{ align-self: flex-end; background: #95ec69; }}
</style></head><body>
<header>{agent}<small>a WuKongIM client that shows only text</small></header>
<main>
{lines}
</main></body></html>
"""


def render(lines: list[Line], agent: str = AGENT) -> str:
    """The chat page of ``lines`` (every text escaped)."""
    items = "\n".join(f'<div class="msg {who}">{html.escape(text)}</div>' for who, text in lines)
    return PAGE.format(agent=html.escape(agent), lines=items)


async def photograph(browser: Browser, lines: list[Line], path: Path) -> None:
    """Draw ``lines`` as a chat page in ``browser``, phone-sized, and save the whole page as ``path`` (PNG)."""
    from tests.e2e.browser import PHONE

    context = await browser.new_context(**PHONE, color_scheme="light", reduced_motion="reduce")
    try:
        page = await context.new_page()
        await page.set_content(render(lines))
        await page.screenshot(path=path, full_page=True)
    finally:
        await context.close()


async def main() -> None:
    from playwright.async_api import async_playwright

    from tests.e2e.browser import launch

    lines, _ = await conversation()
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        await photograph(browser, lines, DOCS / "text-fallback.png")
        await browser.close()


if __name__ == "__main__":
    asyncio.run(main())
