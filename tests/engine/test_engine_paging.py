"""Paged queues: a queue keeps a small window of ready messages in memory and the rest in the store's
page. Every test runs over the Store base-class defaults (FakeStore: the page stays in memory) and
over SegmentStore (the page is in segment files), with a window of a few messages so every path
crosses the page boundary."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine import PUBLISH_REFUSED, PUBLISH_ROUTED, Consumer, Message
from engine._timers import TimerQueue
from engine.model import Model
from engine.segment_store import SegmentStore
from engine.store import Store
from engine.testing import FakeStore

WINDOW = 4


class Owner:
    """A ConsumerOwner recording (consumer, tag, body, redelivery count)."""

    def __init__(self, log: list[Any]) -> None:
        self.blocked = False
        self.log = log

    def deliver(self, consumer: Consumer, tag: int, entry: Any) -> None:
        self.log.append((consumer, tag, entry.msg.body, entry.count))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass

    def delivery_timed_out(self, consumer: Consumer, tag: int) -> None:
        pass


class Env:
    """A model over a store, with a clock the test moves and a way to restart on the same data."""

    def __init__(self, make_store: Callable[[], Store], window: int = WINDOW) -> None:
        self.make_store = make_store
        self.window = window
        self.store = make_store()
        self._boot(0.0)

    def _boot(self, now: float) -> None:
        self.timers = TimerQueue()
        self.model = Model(self.store, self.timers)
        self.model.page_window = self.window
        self.model.now = now
        self.model.restore(self.store.recover())
        self.vhost = self.model.add_vhost("/", persist=False)

    def restart(self, now: float) -> None:
        self.store = self.store.crash() if isinstance(self.store, FakeStore) else self._reopen()
        self._boot(now)

    def _reopen(self) -> Store:
        self.store.close()
        return self.make_store()

    def declare(self, name: str = "q", durable: bool = True, **args: Any):
        return self.model.declare_queue(self.vhost, name, durable=durable, args=args or None)

    def publish(self, key: str, body: bytes, persistent: bool = True, exchange: str = "", **kw: Any) -> int:
        msg = Message(self.model.next_message_id(), exchange, key, {}, body, persistent=persistent, **kw)
        n = self.model.publish(self.vhost, exchange, msg)
        self.sync()
        return n

    def sync(self) -> None:
        self.model.dispatch()
        if self.store.needs_sync:
            self.store.sync(0)

    def advance(self, now: float) -> None:
        self.model.now = now
        while (due := self.timers.pop_due(now)) is not None:
            fn, arg = due
            fn(arg, now)
        self.sync()

    def consume(self, q: Any, prefetch: int = 0, auto_ack: bool = False):
        log: list[Any] = []
        c = Consumer(q, Owner(log), prefetch, auto_ack)
        self.model.consume(q, c)
        self.sync()
        return c, log

    def resident(self, q: Any) -> int:
        """Ready messages held as Python objects."""
        return len(q.ready_entries())

    def ready_bodies(self, q: Any) -> list[bytes]:
        return [e.msg.body for e in q.ready_entries()] + [m.body for m in self.model.paged_messages(q)]


class SubclassedConsumer(Consumer):
    __slots__ = ("priority",)


@pytest.fixture(params=["defaults", "segments"])
def env(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "defaults":
        e = Env(lambda: FakeStore())
    else:
        e = Env(lambda: SegmentStore(tmp_path, recover_window=WINDOW))
    yield e
    e.store.close()


def bodies(n: int, start: int = 0) -> list[bytes]:
    return [b"m%d" % i for i in range(start, start + n)]


def test_order_across_the_page_boundary(env: Env) -> None:
    q = env.declare()
    for i, body in enumerate(bodies(30)):
        env.publish("q", body, persistent=i % 3 != 0)  # persistent and transient interleaved
    assert q.count == 30 and q.paged == 30 - WINDOW and env.resident(q) == WINDOW
    assert env.ready_bodies(q) == bodies(30)
    c, log = env.consume(q, prefetch=3)
    got = []
    while log:
        for consumer, tag, body, _ in list(log):
            got.append(body)
            env.model.ack(consumer, tag)
        log.clear()
        env.sync()
        assert env.resident(q) <= WINDOW
    assert got == bodies(30) and q.count == 0 and q.paged == 0


def test_arrivals_while_paged_stay_behind_the_page(env: Env) -> None:
    q = env.declare()
    for body in bodies(10):
        env.publish("q", body)
    c, log = env.consume(q, prefetch=2)
    env.publish("q", b"late")  # the queue still has paged messages: it goes after them
    got = []
    while log:
        consumer, tag, body, _ = log.pop(0)
        got.append(body)
        env.model.ack(consumer, tag)
        env.sync()
    assert got == bodies(10) + [b"late"]


def test_requeued_messages_go_back_to_the_front(env: Env) -> None:
    q = env.declare()
    for body in bodies(12):
        env.publish("q", body)
    c, log = env.consume(q, prefetch=2)
    (_, t0, b0, _), (_, t1, b1, _) = log
    log.clear()
    env.model.nack(c, t1, requeue=True)
    env.model.nack(c, t0, requeue=True)
    env.sync()
    assert [(b, n) for _, _, b, n in log] == [(b0, 1), (b1, 1)]
    env.model.cancel(c, requeue=True)
    env.sync()
    assert env.ready_bodies(q) == bodies(12) and q.count == 12


def test_purge_and_delete_count_paged_messages(env: Env) -> None:
    q = env.declare()
    for body in bodies(20):
        env.publish("q", body)
    assert env.model.purge(q) == 20 and q.count == 0 and q.paged == 0
    assert env.model.paged_messages(q) == []
    env.publish("q", b"after")
    c, log = env.consume(q, auto_ack=True)
    assert [b for _, _, b, _ in log] == [b"after"]
    r = env.declare("r", durable=False)
    for body in bodies(9):
        env.publish("r", body, persistent=False)
    assert env.model.delete_queue(r) == 9
    assert env.store.paged("/", "r") == []
    env.sync()
    env.restart(10.0)  # purged persistent messages stay purged
    q = env.vhost.queues["q"]
    assert q.count == 0 and "r" not in env.vhost.queues


@pytest.mark.parametrize("overflow", ["drop-head", "reject-publish"])
def test_max_length_across_paged_messages(env: Env, overflow: str) -> None:
    env.declare("dead")
    q = env.declare(**{"x-max-length": 10, "x-overflow": overflow, "x-dead-letter-exchange": "",
                       "x-dead-letter-routing-key": "dead"})
    taken = [env.publish("q", body) for body in bodies(25)]
    dead = env.vhost.queues["dead"]
    if overflow == "drop-head":
        assert [r & (PUBLISH_ROUTED | PUBLISH_REFUSED) for r in taken] == [PUBLISH_ROUTED] * 25
        assert env.ready_bodies(q) == bodies(10, 15) and q.count == 10
        assert env.ready_bodies(dead) == bodies(15)  # dead-lettered in order, paged ones too
    else:
        assert env.ready_bodies(q) == bodies(10) and q.count == 10
        assert env.ready_bodies(dead) == []
        refused = PUBLISH_ROUTED | PUBLISH_REFUSED
        assert [r & refused for r in taken] == [PUBLISH_ROUTED] * 10 + [refused] * 15
        assert env.model.enqueue(q, Message(env.model.next_message_id(), "", "q", {}, b"x")) is False


@pytest.mark.parametrize("overflow", ["drop-head", "reject-publish"])
def test_max_length_bytes_counts_paged_messages(env: Env, overflow: str) -> None:
    q = env.declare(**{"x-max-length-bytes": 100, "x-overflow": overflow})
    for i in range(25):
        env.publish("q", b"%010d" % i)  # 10-byte bodies: room for 10
    assert q.count == 10 and q.bytes + q.paged_bytes == 100
    kept = range(15, 25) if overflow == "drop-head" else range(10)
    assert env.ready_bodies(q) == [b"%010d" % i for i in kept]
    if overflow == "reject-publish":
        assert env.model.enqueue(q, Message(env.model.next_message_id(), "", "q", {}, b"x")) is False


def test_memory_alarm_counts_only_bodies_held_in_memory(env: Env) -> None:
    q = env.declare()
    for _ in range(50):
        env.publish("q", b"x" * 1000)
    assert q.paged == 50 - WINDOW and env.model.queued_bytes == WINDOW * 1000
    c, log = env.consume(q, auto_ack=True)
    env.sync()
    assert len(log) == 50 and q.count == 0 and env.model.queued_bytes == 0


def test_ttl_and_dead_lettering_of_paged_messages(env: Env) -> None:
    env.declare("dead")
    q = env.declare(**{"x-message-ttl": 1000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    env.model.now = 100.0
    for body in bodies(10):
        env.publish("q", body)
    env.model.now = 100.5
    env.publish("q", b"fresh")
    env.publish("q", b"short", expires_at=100.7)  # its own expiry is earlier than the queue's
    env.advance(101.2)  # the in-memory window expired by its timers; the paged ones are checked when
    c, log = env.consume(q, auto_ack=True)  # they reach the window: all expire, "fresh" is delivered
    assert [b for _, _, b, _ in log] == [b"fresh"]
    dead = env.vhost.queues["dead"]
    assert env.ready_bodies(dead) == bodies(10) + [b"short"]
    deaths = [e.msg.headers["x-death"][0] for e in dead.ready_entries()]
    assert {d["reason"] for d in deaths} == {"expired"} and q.count == 0


def test_get_across_the_page_boundary(env: Env) -> None:
    q = env.declare()
    for body in bodies(9):
        env.publish("q", body, persistent=False)
    holder = Consumer(q, Owner([]), 0, True)
    got = []
    while (res := env.model.get(q, holder)) is not None:
        got.append((res[1].msg.body, q.count))
    assert got == [(b, 8 - i) for i, b in enumerate(bodies(9))]


def test_consumer_priorities_with_a_paged_backlog(env: Env) -> None:
    q = env.declare()
    for body in bodies(12):
        env.publish("q", body)
    log: list[Any] = []
    low = SubclassedConsumer(q, Owner(log), 0)
    low.priority = 0
    high = SubclassedConsumer(q, Owner(log), 3)
    high.priority = 5
    env.model.consume(q, low, 0)
    env.model.consume(q, high, 5)
    env.sync()
    assert [(c is high, b) for c, _, b, _ in log] == [(True, b) for b in bodies(3)] + [
        (False, b) for b in bodies(9, 3)]


def test_restart_with_a_paged_backlog(env: Env) -> None:
    q = env.declare()
    for i, body in enumerate(bodies(40)):
        env.publish("q", body, persistent=i % 4 != 3)  # every 4th transient: gone after a restart
    c, log = env.consume(q, prefetch=2)
    for consumer, tag, _, _ in log:
        env.model.nack(consumer, tag, requeue=True)  # m0, m1 redelivered once
    env.sync()
    env.model.cancel(c, requeue=True)
    env.sync()
    env.restart(50.0)
    q = env.vhost.queues["q"]
    survivors = [b for i, b in enumerate(bodies(40)) if i % 4 != 3]
    assert q.count == len(survivors)
    assert env.resident(q) <= max(WINDOW, 2 * 2)
    assert env.ready_bodies(q) == survivors
    env.publish("q", b"new")  # ids continue after every recovered (also paged) message
    c, log = env.consume(q, prefetch=1)
    got = []
    while log:
        consumer, tag, body, count = log.pop(0)
        got.append((body, count))
        env.model.ack(consumer, tag)
        env.sync()
    assert [b for b, _ in got] == survivors + [b"new"]
    assert [n for _, n in got[:3]] == [2, 2, 0]  # the nack and the cancel each returned m0 and m1


def test_queue_ttl_survives_a_restart(env: Env) -> None:
    env.declare("dead")
    env.declare(**{"x-message-ttl": 5000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    env.model.now = 100.0
    for body in bodies(8):
        env.publish("q", body)
    env.restart(103.0)
    q = env.vhost.queues["q"]
    env.advance(103.0)
    assert q.count == 8
    env.advance(106.0)  # 100 + 5 s: the window's timers and the paged ones at page-in
    c, log = env.consume(q, auto_ack=True)
    assert log == [] and q.count == 0
    assert env.ready_bodies(env.vhost.queues["dead"]) == bodies(8)


def test_quorum_queue_pages_and_recovers_transient_messages(env: Env) -> None:
    """A quorum queue stores every message, paged or not, whatever its delivery mode: all come back
    after a crash, in order, without the ones acked before it."""
    q = env.declare("qq", **{"x-queue-type": "quorum"})
    classic = env.declare("cl")
    for body in bodies(30):
        env.publish("qq", body, persistent=False)
        env.publish("cl", body, persistent=False)
    assert q.paged == 30 - WINDOW
    c, log = env.consume(q, prefetch=5)
    for consumer, tag, _, _ in list(log):
        env.model.ack(consumer, tag)
    env.sync()
    env.restart(1.0)
    q, classic = env.vhost.queues["qq"], env.vhost.queues["cl"]
    assert q.quorum and env.ready_bodies(q) == bodies(25, 5)
    assert classic.count == 0
