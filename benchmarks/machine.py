"""What the benchmarks ran on: CPU model, cores, Python and library versions."""

from __future__ import annotations

import os
import platform
from importlib import metadata


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def version(package: str) -> str:
    """The installed version of ``package`` or ``"absent"``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def describe() -> list[str]:
    """Lines describing the machine and the versions that matter for the numbers."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"CPU: {cpu_model()}, {os.cpu_count()} cores ({platform.machine()}, {platform.system()} {platform.release()})",
        f"Python {platform.python_version()} ({platform.python_implementation()}), asyncio default loop; "
        f"websockets {version('websockets')}, pydantic {version('pydantic')}, mcp {version('mcp')}, "
        f"hermes-agent {version('hermes-agent')}, SQLite {__import__('sqlite3').sqlite_version}",
        f"load average at start: {load}",
    ]
