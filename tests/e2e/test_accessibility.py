"""The reference App passes axe-core (from npm) with no violation: the connect screen and every card, light and dark."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Page, expect

from .conftest import AXE, Agent, Open

pytestmark = [pytest.mark.browser, pytest.mark.node]

CARDS: list[tuple[str, str | None, dict[str, Any]]] = [
    ("choice", None, {"question": "Deploy to which environment?", "options": ["test", "staging", "production"]}),
    ("confirm", None, {"message": "Delete the branch?", "details": "feature/old", "risk": "restricted"}),
    (
        "input",
        None,
        {
            "prompt": "Your details",
            "fields": {
                "type": "object",
                "properties": {"name": {"type": "string", "title": "Name"}, "age": {"type": "integer"}},
                "required": ["name"],
            },
        },
    ),
    ("calculator", "multiply", {"a": 6, "b": 7}),
    ("canvas", "open", {"width": 320, "height": 200}),
]


async def violations(page: Page) -> list[str]:
    """axe-core's violations on the page as it is, one line each (rule, impact, where)."""
    await page.add_script_tag(path=str(AXE))
    found = await page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .map(v => `${v.id} (${v.impact}): ${v.nodes.map(n => n.target.join(' ')).join(', ')}`)"""
    )
    return list(found)


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_the_connect_screen_has_no_accessibility_violation(open_themed: Open, scheme: str) -> None:
    page = await open_themed(scheme, connected=False)
    await expect(page.locator("#connect")).to_be_visible()
    assert await violations(page) == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("tool", "action", "arguments"), CARDS, ids=[name for name, _, _ in CARDS])
async def test_every_card_has_no_accessibility_violation(
    agent: Agent, open_themed: Open, scheme: str, tool: str, action: str | None, arguments: dict[str, Any]
) -> None:
    page = await open_themed(scheme)
    call = agent.call(tool, arguments, action=action)
    await expect(page.locator(f'article.card[data-tool="{tool}"]')).to_have_count(1)
    assert await violations(page) == []
    call.cancel()
