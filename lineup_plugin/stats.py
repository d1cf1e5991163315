"""Metering: what happened to the calls, per tool, status and device, from the store's audit log.

Every call leaves audit records (:mod:`lineup_plugin.protocol.session`): ``call.created`` (the
tool's name as detail), ``call.delivered`` per device, the App's acks, and one terminal record
``call.<status>`` (``completed``, ``rejected``, ``cancelled``, ``expired``, ``unsupported``,
``failed``; the answering device on it). A call that could not even start (``no_app``,
``too_large``) has only its ``call.failed``.

:func:`compute` folds such records into :class:`Stats`:

- per tool: calls, and per status the count and the time from the call's creation to its end
  (p50/p95; for ``completed`` that is the user's answer time), and the **error rate**: the share
  of calls that ended ``failed`` or ``unsupported`` (the tool could not run — as opposed to the
  user's outcomes ``rejected``, ``expired``, ``cancelled``);
- per device: calls delivered to it, and per status the calls it ended (its answers) with their times;
  its name, as people call it ("Pixel 7 (Chrome)"), once it answered a call the store still keeps.

A call still waiting counts as ``open``. Only what the store's retention keeps can be counted
(the audit log keeps the last 200,000 records): :attr:`Stats.first_record_at` says from when.
:func:`read_stats` reads the durable store's file (read-only) for ``lineup stats``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, StoreError
from .store import AuditRecord, read_call_audit

if TYPE_CHECKING:
    from .config.settings import Settings

#: the statuses a call ends with
TERMINAL = ("completed", "rejected", "cancelled", "expired", "unsupported", "failed")
#: the statuses counted as errors: the tool could not run
ERRORS = frozenset({"failed", "unsupported"})
#: a call that has not ended (yet)
OPEN = "open"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_since(text: str, *, now: float | None = None) -> float:
    """``--since``: a duration back from ``now`` (``90s``, ``30m``, ``1h``, ``7d``, ``2w``, or
    combined: ``1h30m``) or an ISO 8601 time (local time when it names no zone); seconds since the epoch.

    Raises ConfigError for anything else.
    """
    spec = text.strip().lower()
    parts = _DURATION.findall(spec)
    if parts and "".join(number + unit for number, unit in parts) == spec:
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
        since = (time.time() if now is None else now) - seconds
        if not is_time(since):
            raise ConfigError(f"--since: {text!r} goes back before the year 1")
        return since
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"--since: expected a duration (30m, 1h, 7d) or an ISO time, not {text!r}") from None
    return (when if when.tzinfo is not None else when.astimezone()).timestamp()


#: the times a since can name: those a date can show (years 1 to 9999)
EARLIEST = -62135596800.0
LATEST = 253402300799.0


def is_time(at: float) -> bool:
    """Whether ``at`` (seconds since the epoch) is a time a date can show: finite, years 1 to 9999."""
    return math.isfinite(at) and EARLIEST <= at <= LATEST


def percentile(values: list[float], p: float) -> float | None:
    """The ``p``-th percentile (nearest rank) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class Figures:
    """How many calls, and the seconds each took from creation to its end."""

    count: int = 0
    seconds: list[float] = field(default_factory=list)

    def add(self, seconds: float | None) -> None:
        """Count one call (and its time, when it has one)."""
        self.count += 1
        if seconds is not None:
            self.seconds.append(seconds)

    @property
    def p50(self) -> float | None:
        """The median time (seconds)."""
        return percentile(self.seconds, 50)

    @property
    def p95(self) -> float | None:
        """The 95th percentile time (seconds)."""
        return percentile(self.seconds, 95)

    def as_json(self) -> dict[str, Any]:
        """``{count, p50, p95}`` (times in seconds, None when no call had one)."""
        return {"count": self.count, "p50": _round(self.p50), "p95": _round(self.p95)}


@dataclass
class ToolStats:
    """The calls of one tool."""

    tool: str
    statuses: dict[str, Figures] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        """How many calls."""
        return sum(figures.count for figures in self.statuses.values())

    @property
    def error_rate(self) -> float:
        """The share of calls that ended ``failed`` or ``unsupported`` (0 with no calls)."""
        errors = sum(figures.count for status, figures in self.statuses.items() if status in ERRORS)
        return errors / self.calls if self.calls else 0.0


@dataclass
class DeviceStats:
    """The calls delivered to one App device, and those it ended (answered)."""

    device: str
    delivered: int = 0
    statuses: dict[str, Figures] = field(default_factory=dict)
    #: the device's name (from the newest call it answered), None when not known
    name: str | None = None


@dataclass
class Stats:
    """The metering of the calls in an audit log (see the module docstring)."""

    since: float | None
    first_record_at: float | None
    tools: dict[str, ToolStats] = field(default_factory=dict)
    devices: dict[str, DeviceStats] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        """How many calls in all."""
        return sum(tool.calls for tool in self.tools.values())

    def as_json(self) -> dict[str, Any]:
        """The figures as JSON-ready data (times in seconds, ``since`` and ``first_record`` as ISO times)."""
        return {
            "since": _iso(self.since),
            "first_record": _iso(self.first_record_at),
            "calls": self.calls,
            "tools": {
                name: {
                    "calls": tool.calls,
                    "error_rate": round(tool.error_rate, 4),
                    "statuses": {status: figures.as_json() for status, figures in sorted(tool.statuses.items())},
                }
                for name, tool in sorted(self.tools.items())
            },
            "devices": {
                name: {
                    "name": device.name,
                    "delivered": device.delivered,
                    "statuses": {status: figures.as_json() for status, figures in sorted(device.statuses.items())},
                }
                for name, device in sorted(self.devices.items())
            },
        }


@dataclass
class _Call:
    tool: str | None = None
    created_at: float | None = None
    delivered: set[str] = field(default_factory=set)
    status: str = OPEN
    ended_at: float | None = None
    device: str | None = None
    device_name: str | None = None


def compute(records: Iterable[AuditRecord], *, since: float | None = None) -> Stats:
    """Fold audit records (oldest first) into :class:`Stats`.

    A call counts when its ``call.created`` is among the records (the records of calls created
    earlier are left out), or when it failed before it was created (``no_app``, ``too_large``).
    """
    meter = Meter(since=since)
    meter.feed(records)
    return meter.stats()


class Meter:
    """:func:`compute` in steps: :meth:`feed` the records page by page (oldest first), then take
    the :meth:`stats` (how the process that holds the store meters it and still serves its Apps)."""

    def __init__(self, *, since: float | None = None) -> None:
        self.since = since
        self._calls: dict[str, _Call] = {}
        self._first: float | None = None

    def feed(self, records: Iterable[AuditRecord]) -> None:
        """Take the next records, oldest first."""
        calls = self._calls
        for record in records:
            self._first = record.at if self._first is None else self._first
            if record.call_id is None or not record.event.startswith("call."):
                continue
            stage = record.event[len("call.") :]
            call = calls.get(record.call_id)
            if stage == "created":
                calls[record.call_id] = _Call(tool=record.detail or record.tool, created_at=record.at)
                continue
            if call is None:
                if stage != "failed" or record.detail in ("", "recovered after restart"):
                    continue  # created before the records begin
                call = calls[record.call_id] = _Call(created_at=record.at)
            call.tool = call.tool or record.tool
            if stage == "delivered" and record.device_id:
                call.delivered.add(record.device_id)
            elif stage in TERMINAL and call.status == OPEN:
                call.status, call.ended_at, call.device = stage, record.at, record.device_id
                call.device_name = record.answered_name if record.device_id is not None else None

    def stats(self) -> Stats:
        """The figures of every record fed so far."""
        stats = Stats(since=self.since, first_record_at=self._first)
        for call in self._calls.values():
            seconds = None
            if call.ended_at is not None and call.created_at is not None:
                seconds = max(0.0, call.ended_at - call.created_at)
            tool = stats.tools.setdefault(call.tool or "?", ToolStats(call.tool or "?"))
            tool.statuses.setdefault(call.status, Figures()).add(seconds)
            for device_id in call.delivered:
                stats.devices.setdefault(device_id, DeviceStats(device_id)).delivered += 1
            if call.device is not None:
                device = stats.devices.setdefault(call.device, DeviceStats(call.device))
                device.statuses.setdefault(call.status, Figures()).add(seconds)
                device.name = call.device_name or device.name  # calls oldest first: the newest name wins
        return stats


def read_stats(settings: Settings, *, since: float | None = None) -> Stats:
    """The metering of the durable store ``settings`` name (read-only).

    Raises StoreBusyError while a process serving the App holds the store, StoreError when there
    is no durable store to read.
    """
    if settings.store != "sqlite":
        raise StoreError("the memory store keeps no calls once its process ends; nothing to count")
    return compute(read_call_audit(settings.database, since=since), since=since)


def format_table(stats: Stats | dict[str, Any]) -> str:
    """The figures (or their :meth:`Stats.as_json`, as a server answers them) as text tables for a
    person: per tool and status, then per device and status."""
    data = stats.as_json() if isinstance(stats, Stats) else stats
    calls = data["calls"]
    since = f" since {data['since']}" if data["since"] is not None else ""
    kept = f" (the audit log goes back to {data['first_record']})" if data["first_record"] is not None else ""
    lines = [f"{calls} call{'s' if calls != 1 else ''}{since}{kept}"]
    if not calls:
        return lines[0]
    rows: list[tuple[str, ...]] = [("TOOL", "STATUS", "CALLS", "P50", "P95", "ERROR RATE")]
    for name, tool in data["tools"].items():
        rows += _status_rows(name, tool["statuses"])
        rows.append((name, "(all)", str(tool["calls"]), "", "", f"{tool['error_rate']:.1%}"))
    lines += ["", *_table(rows)]
    if data["devices"]:
        rows = [("DEVICE", "STATUS", "CALLS", "P50", "P95", "")]
        for device_id, device in data["devices"].items():
            name = device.get("name")
            label = f"{name} ({device_id})" if name else device_id
            rows.append((label, "(delivered)", str(device["delivered"]), "", "", ""))
            rows += _status_rows(label, device["statuses"])
        lines += ["", *_table(rows)]
    return "\n".join(lines)


def _status_rows(name: str, statuses: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (name, status, str(one["count"]), _seconds(one["p50"]), _seconds(one["p95"]), "")
        for status, one in statuses.items()
    ]


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
