"""The one timer of the hub and the push service: it goes off at the earliest moment it was armed for."""

from __future__ import annotations

import asyncio

from lineup_plugin.alarm import Alarm


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_it_goes_off_once_at_the_earliest_moment_armed() -> None:
    loop = asyncio.get_running_loop()
    went_off: list[float] = []
    done = asyncio.Event()

    def callback() -> None:
        went_off.append(loop.time())
        done.set()

    clock = Clock()
    alarm = Alarm(clock, callback)
    start = loop.time()
    alarm.arm(clock.now + 30)
    alarm.arm(clock.now + 0.01)  # sooner: replaces
    alarm.arm(clock.now + 20)  # later: left alone
    alarm.arm(None)  # nothing due: left alone
    assert alarm.armed
    await done.wait()
    assert len(went_off) == 1 and went_off[0] - start < 20
    assert not alarm.armed
    await asyncio.sleep(0)
    assert len(went_off) == 1


async def test_a_moment_passed_goes_off_at_once_and_cancel_stops_it() -> None:
    done = asyncio.Event()
    clock = Clock()
    alarm = Alarm(clock, done.set)
    alarm.arm(clock.now - 5)
    await done.wait()
    done.clear()
    alarm.arm(clock.now + 0.01)
    alarm.cancel()
    assert not alarm.armed
    alarm.cancel()  # twice is fine
    later = asyncio.Event()
    Alarm(clock, later.set).arm(clock.now + 0.05)  # after the moment the cancelled one was armed for
    await later.wait()
    assert not done.is_set()


def test_with_no_running_loop_nothing_is_armed() -> None:
    alarm = Alarm(Clock(), lambda: None)
    alarm.arm(0.0)
    assert not alarm.armed
