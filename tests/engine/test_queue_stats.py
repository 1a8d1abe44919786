"""Per-queue message counters and their sampled rates (engine.stats), on a simulated clock."""

from __future__ import annotations

import random

from engine import Broker
from engine._message import Message
from engine.config import Config
from engine.model import Consumer
from engine.stats import Sampler, snapshot
from engine.store import MemoryStore


class _Owner:
    blocked = False


class _Holder(Consumer):
    __slots__ = ()
    blocked = False


def _broker() -> Broker:
    return Broker(Config(), MemoryStore(), random.Random(3))  # type: ignore[arg-type]


def _publish(b: Broker, rk: str, n: int) -> None:
    model = b.model
    for _ in range(n):
        model.publish(model.vhosts["/"], "", Message(model.next_message_id(), "", rk, {}, b"x" * 10))


def _queue_row(b: Broker, name: str) -> dict:
    return next(q for q in snapshot(b, ("queues",))["queues"] if q["name"] == name)


def test_counters_follow_publish_get_ack_and_redelivery() -> None:
    b = _broker()
    model = b.model
    q = model.declare_queue(model.vhosts["/"], "counted", False, False, None, None)
    idle = model.declare_queue(model.vhosts["/"], "idle", False, False, None, None)
    _publish(b, "counted", 5)
    holder = _Holder(q, _Owner(), 0, False)  # type: ignore[arg-type]
    tags = [model.get(q, holder)[0] for _ in range(3)]  # type: ignore[index]
    model.ack(holder, tags[1], multiple=True)  # acks the first two
    model.nack(holder, tags[2], False, True)  # back to the queue: its next delivery is a redelivery
    again = model.get(q, holder)
    assert again is not None and again[1].count == 1
    assert _queue_row(b, "counted")["counters"] == {"publish": 5, "deliver_get": 4, "redeliver": 1, "ack": 2}
    assert _queue_row(b, "idle")["counters"] == {"publish": 0, "deliver_get": 0, "redeliver": 0, "ack": 0}
    assert idle._x is None  # an idle queue gained nothing


def test_rates_are_sampled_per_second_and_fall_back_to_zero() -> None:
    b = _broker()
    model = b.model
    model.declare_queue(model.vhosts["/"], "busy", False, False, None, None)
    sampler = Sampler(1.0)
    sampler.sample(0.0, model)
    _publish(b, "busy", 10)  # traffic begins between two samples: its rate counts from zero
    sampler.sample(1.0, model)
    q = model.vhosts["/"].queues["busy"]
    rates = sampler.queue_rates(q)
    assert rates["publish"] == 10.0 and rates["messages"] == 0.0  # depth seeded with the current depth
    for t in range(2, 8):  # quiet for more than the averaging span
        sampler.sample(float(t), model)
    assert sampler.queue_rates(q)["publish"] == 0.0
    _publish(b, "busy", 20)
    sampler.sample(8.0, model)
    rates = sampler.queue_rates(q)
    assert rates["publish"] == 4.0 and rates["messages"] == 4.0  # 20 over the last five seconds
    model.delete_queue(q)
    sampler.sample(9.0, model)
    assert sampler.queues == {}  # a deleted queue's samples are dropped


class _Recorder:
    blocked = False

    def __init__(self) -> None:
        self.tags: list[int] = []

    def deliver(self, consumer: Consumer, tag: int, entry: object) -> None:
        self.tags.append(tag)


def test_consumer_deliveries_are_counted_per_queue() -> None:
    b = _broker()
    model = b.model
    q = model.declare_queue(model.vhosts["/"], "consumed", False, False, None, None)
    other = model.declare_queue(model.vhosts["/"], "other", False, False, None, None)
    owner = _Recorder()
    consumer = _Holder(q, owner, 3, False)  # type: ignore[arg-type]
    model.consume(q, consumer)
    _publish(b, "consumed", 5)
    _publish(b, "other", 2)
    model.dispatch()
    assert len(owner.tags) == 3  # the prefetch
    model.ack(consumer, owner.tags[-1], multiple=True)
    model.dispatch()
    assert len(owner.tags) == 5
    assert _queue_row(b, "consumed")["counters"] == {"publish": 5, "deliver_get": 5, "redeliver": 0, "ack": 3}
    assert _queue_row(b, "other")["counters"]["deliver_get"] == 0 and other.count == 2
