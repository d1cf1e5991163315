"""The push rules with a fake clock: who is pushed for a card, once, and who gets the close."""

from __future__ import annotations

from lineup_plugin.push.plan import Push, PushPlan

PHONE = "https://push.example/phone"
LAPTOP = "https://push.example/laptop"
#: the phone is one device on the direct server and another on the relay
TARGETS = {PHONE: {"phone-direct", "wukongim:me/pair_1"}, LAPTOP: {"laptop"}}


def test_a_card_is_pushed_to_every_subscription_once_the_grace_has_passed() -> None:
    plan = PushPlan(grace=5.0)
    plan.opened("c1", now=100.0)
    assert plan.due() == 105.0
    assert plan.tick(104.9, TARGETS) == []
    assert plan.tick(105.0, TARGETS) == [Push(PHONE, "c1", "card"), Push(LAPTOP, "c1", "card")]
    assert plan.due() is None


def test_no_push_to_a_device_that_shows_the_card_on_any_of_its_paths() -> None:
    plan = PushPlan(grace=5.0)
    plan.opened("c1", now=100.0)
    plan.shown("c1", "wukongim:me/pair_1")  # the phone showed it over the relay
    assert plan.tick(105.0, TARGETS) == [Push(LAPTOP, "c1", "card")]


def test_one_push_per_device_per_card_not_per_redelivery_or_reconnect() -> None:
    plan = PushPlan(grace=5.0)
    plan.opened("c1", now=100.0)
    assert len(plan.tick(105.0, TARGETS)) == 2
    plan.opened("c1", now=200.0)  # re-sent after a reconnect, or called again by a retrying runtime
    assert plan.due() is None
    assert plan.tick(300.0, TARGETS) == []


def test_the_end_of_a_card_closes_only_the_notifications_it_caused() -> None:
    plan = PushPlan(grace=5.0)
    plan.opened("c1", now=100.0)
    plan.shown("c1", "laptop")
    plan.tick(105.0, TARGETS)
    assert plan.ended("c1") == [Push(PHONE, "c1", "closed")]
    assert plan.ended("c1") == []
    assert plan.waiting == []


def test_a_card_that_ends_within_the_grace_is_never_pushed() -> None:
    plan = PushPlan(grace=5.0)
    plan.opened("c1", now=100.0)
    assert plan.ended("c1") == []
    assert plan.tick(105.0, TARGETS) == []


def test_a_gone_subscription_gets_no_close() -> None:
    plan = PushPlan(grace=0.0)
    plan.opened("c1", now=100.0)
    plan.tick(100.0, TARGETS)
    plan.forget(PHONE)
    assert plan.ended("c1") == [Push(LAPTOP, "c1", "closed")]


def test_cards_are_decided_each_at_its_own_time() -> None:
    plan = PushPlan(grace=5.0)
    plan.opened("c1", now=100.0)
    plan.opened("c2", now=103.0)
    assert [p.call_id for p in plan.tick(105.0, {PHONE: {"phone-direct"}})] == ["c1"]
    assert plan.due() == 108.0
    assert [p.call_id for p in plan.tick(108.0, {PHONE: {"phone-direct"}})] == ["c2"]
