"""What idle queues and STOMP queue subscriptions cost in the engine, pinned loosely so a regression
shows (measured with tracemalloc: ~133 B per idle queue besides its name, was ~173 B; ~165 B per
subscription besides its frame, was ~181 B with a consumer list and ~330 B with the destination string it kept), and the compact layout keeps the attributes the rest of the broker reads and writes."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

import engine
from engine import Broker, Config, Limits, MemoryStore
from engine.model.objects import Consumer, Queue, _QueueExtras
from engine.model.security import UserAccess
from engine.stomp.session import StompSession, StompSubscription
from engine.testing import AmqpSimClient, SimNetwork
from stompproto import Subscribe

N = 20_000
PEER = ("127.0.0.1", 40000)  # one tuple for every connection: not theirs to count


def per_object(build: Callable[[int], Any]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        keep = build(N)
        gc.collect()
        per = (tracemalloc.get_traced_memory()[0] - before) / N
    finally:
        tracemalloc.stop()
    del keep
    return per


def make_broker() -> Broker:
    return Broker(Config(limits=Limits(max_subscriptions=N + 10)), MemoryStore(), random.Random(0))


def test_idle_queue_and_queue_subscription_stay_small() -> None:
    broker = make_broker()
    model = broker.model
    vhost = model.vhosts["/"]
    names = [f"bench.mq.{i}" for i in range(N)]

    def queues(n: int) -> None:
        for name in names[:n]:
            model.declare_queue(vhost, name)  # non-durable: the store's part is pinned in tests/storage

    assert per_object(queues) < 150

    session = StompSession(broker, 1, ("127.0.0.1", 1))
    session.vhost = vhost
    session.access = UserAccess(broker.model.security, "guest", "/")
    frames = [Subscribe({"destination": "/queue/" + name, "id": str(i)}) for i, name in enumerate(names)]

    def subs(n: int) -> None:
        for frame in frames[:n]:
            session._on_subscribe(frame)
        model.dirty.clear()

    # the subscription (96), the queue's consumers as a 1-tuple (48; a list was 64), the session's
    # dict slot: 165 B (was 181); compiled, the subscription is a native object with a vtable pointer: 8 B more
    assert per_object(subs) < (180 if engine.COMPILED else 172)
    sub = session.subs["7"]
    assert isinstance(sub, StompSubscription)
    assert sub.destination == "/queue/bench.mq.7" and sub.ack_mode == "auto" and not sub.owns_queue
    assert type(sub._m) is int  # the destination is its queue's: not kept


def test_subscription_keeps_other_destinations_and_modes() -> None:
    broker = make_broker()
    vhost = broker.model.vhosts["/"]
    session = StompSession(broker, 1, ("127.0.0.1", 1))
    session.vhost = vhost
    session.access = UserAccess(broker.model.security, "guest", "/")
    q = broker.model.declare_queue(vhost, "q")
    for mode in ("auto", "client", "client-individual"):
        for owns in (False, True):
            sub = StompSubscription(q, session, 0, "s", "/amq/queue/q", mode, owns)
            assert (sub.destination, sub.ack_mode, sub.owns_queue, sub.auto_ack) == \
                ("/amq/queue/q", mode, owns, mode == "auto")
            sub = StompSubscription(q, session, 0, "s", "/queue/q", mode, owns)
            assert (sub.destination, sub.ack_mode, sub.owns_queue) == ("/queue/q", mode, owns)


def test_queue_extras_are_created_on_first_use_only() -> None:
    vhost = make_broker().model.vhosts["/"]
    q = Queue(vhost, "q", durable=True)
    assert q._x is None and q.durable and not q.auto_delete
    assert (q.exclusive_owner, q.args, q.bindings, q._hi, q.paged_bytes) == (None, None, None, None, 0)
    q.paged_bytes = 0
    q.args = None
    assert q._x is None  # writing a default creates nothing
    q.paged_bytes = 10
    assert isinstance(q._x, _QueueExtras) and q.paged_bytes == 10
    q.auto_delete = True
    q.durable = False
    assert q.auto_delete and not q.durable
    owner = object()
    q2 = Queue(vhost, "q2", False, True, owner, {"x-max-length": 1})
    assert (q2.exclusive_owner, q2.args, q2.auto_delete) == (owner, {"x-max-length": 1}, True)


def _client_bytes_of_amqp_login() -> list[bytes]:
    """What an AMQP client sends to log in and open channel 1 (recorded from a simulated client)."""
    sent: list[bytes] = []
    net = SimNetwork(make_broker(), seed=0)
    client = net.connect(protocol="amqp")
    assert isinstance(client, AmqpSimClient)
    raw = client.send_raw

    def record(data: bytes) -> None:
        sent.append(bytes(data))
        raw(data)

    client.send_raw = record  # type: ignore[method-assign]
    client.amqp_open()
    client.open_channel(1)
    net.run_until_idle()
    return sent


STOMP_LOGIN = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\nheart-beat:0,0\n\n\x00"


@pytest.mark.parametrize(("protocol", "limit"), [("amqp", 4096), ("stomp", 2300)])
def test_idle_connection_after_login_stays_small(protocol: str, limit: int) -> None:
    """Issue 27's S10: an idle AMQP connection (logged in, channel 1 open) was ~9.2 KB, 4.5 KB of
    it two frozensets of the methods each role may send; STOMP was ~2.5 KB, 0.7 KB of it a deque
    for at most two timer events."""
    chunks = _client_bytes_of_amqp_login() if protocol == "amqp" else [STOMP_LOGIN]
    broker = make_broker()
    ids = iter(range(1, 10 * N))

    def connections(n: int) -> None:
        for _ in range(n // 10):  # N // 10 connections are plenty for a per-connection figure
            conn_id = next(ids)
            broker.connection_made(conn_id, protocol, PEER, 1.0)
            for data in chunks:
                broker.data_received(conn_id, data, 1.0)
            broker.drain()

    connections(100)  # warm-up: first-use caches of the broker are not per connection
    assert all(not s.handshaking for s in broker.sessions.values())
    assert per_object(connections) * 10 < limit


class _Owner:
    blocked = False

    def deliver(self, consumer: Any, tag: int, entry: Any) -> None:
        pass

    def consumer_cancelled(self, consumer: Any) -> None:
        pass

    def delivery_timed_out(self, consumer: Any, tag: int) -> None:
        pass


def test_queue_consumers_one_tuple_then_list_then_none() -> None:
    """One consumer is kept as a 1-tuple, the second makes a list; cancelling them all leaves None."""
    model = make_broker().model
    q = model.declare_queue(model.vhosts["/"], "rr")
    a, b, c = (Consumer(q, _Owner(), auto_ack=True) for _ in range(3))
    model.consume(q, a)
    assert q.consumers == (a,)
    model.consume(q, b)
    model.consume(q, c)
    assert q.consumers == [a, b, c]
    model.cancel(b)
    assert q.consumers == [a, c]
    model.cancel(a)
    assert q.consumers == [c]
    model.cancel(c)
    assert q.consumers is None
    model.consume(q, b)
    assert q.consumers == (b,)
