"""An example LineUp plugin: one in-process tool, and one App tool with its own App renderer (rating.js)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lineup_plugin

# Deterministic sample data: an example plugin must not need the network.
_FORECASTS = {"paris": (18.0, "cloudy"), "beijing": (24.0, "sunny"), "london": (14.0, "rain")}


def weather(city: str, unit: Literal["c", "f"] = "c") -> dict[str, object]:
    """Today's weather for a city: temperature and conditions."""
    celsius, conditions = _FORECASTS.get(city.lower(), (20.0, "clear"))
    temperature = celsius if unit == "c" else celsius * 9 / 5 + 32
    return {"city": city, "temperature": temperature, "unit": unit, "conditions": conditions}


RATING = {
    "name": "rating",
    "type": "action",
    "description": "Ask the user to rate something from 1 to 5 stars on their App.",
    "inputSchema": {
        "type": "object",
        "properties": {"subject": {"type": "string", "description": "what to rate"}},
        "required": ["subject"],
    },
    "outputSchema": {
        "type": "object",
        "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["stars"],
    },
}


@lineup_plugin.hookimpl
def register_tools(register):  # type: ignore[no-untyped-def]
    """Register the weather tool (runs in the agent) and the rating tool (lives on the App)."""
    register(weather)
    register(RATING)


@lineup_plugin.hookimpl
def register_renderers(register):  # type: ignore[no-untyped-def]
    """Ship the App renderer of the rating tool: five stars (served by LineUp from the App's origin)."""
    register("rating", Path(__file__).parent / "rating.js")
