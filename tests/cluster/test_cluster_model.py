"""The model side of a cluster node (engine.cluster), deterministic, without processes: applying
another node's definition changes, remote queues (publishes go to the outbox), taking a queue over
and stepping down, and consuming a remote queue through a relay."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from engine import Broker, Config, MemoryStore
from engine._message import Entry, Message
from engine.cluster import apply_change, step_down, take_over
from engine.cluster.changes import Muting, encode_args
from engine.cluster.forward import make_forward
from engine.cluster.relay import Relay, Relays
from engine.model import Consumer
from engine.model.security import UserRecord
from engine.store import StoredMessage


class NodeStore(Muting, MemoryStore):
    """A MemoryStore that is node ``b`` of a cluster: mutable, with an outbox, counting writes."""

    needs_sync = True  # a forward is a store write: confirms wait for the sync that sends it

    def __init__(self) -> None:
        super().__init__()
        self.node = "b"
        self.writes: list[str] = []
        self.outbox: list[tuple[int, str, str, str, Message]] = []
        self.ids: dict[tuple[str, str], int] = {}

    def forget_queue(self, vhost: str, name: str, qid: int | None = None, led: bool = False) -> None:
        if qid is None:
            self.ids.pop((vhost, name), None)
        else:
            self.ids[(vhost, name)] = qid

    def adopt(self, vhost: str, name: str, epoch: int) -> None:
        self.writes.append(f"adopt {name} {epoch}")

    def add_queue(self, qdef: Any) -> None:
        if not self.muted:
            self.writes.append(f"queue {qdef.name}")
        super().add_queue(qdef)

    def put_doc(self, kind: str, key: str, doc: str) -> None:
        if not self.muted:
            self.writes.append(f"doc {kind} {key}")
        super().put_doc(kind, key, doc)

    def forward(self, token: int, leader: str, vhost: str, queue: str, msg: Message) -> None:
        self.outbox.append((token, leader, vhost, queue, msg))


class Owner:
    blocked = False

    def __init__(self) -> None:
        self.got: list[tuple[int, Entry]] = []
        self.cancelled = 0

    def deliver(self, consumer: Consumer, tag: int, entry: Entry) -> None:
        self.got.append((tag, entry))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        self.cancelled += 1

    def delivery_timed_out(self, consumer: Consumer, tag: int) -> None:
        pass


@pytest.fixture
def broker() -> Broker:
    b = Broker(Config(), NodeStore(), random.Random(1))
    b.model.publisher.forward = make_forward(b.model, b.store, b.sync_token)  # type: ignore[arg-type]
    return b


def _queue_added(broker: Broker, name: str, leader: str) -> None:
    apply_change(broker, "queue.add", {"vhost": "/", "name": name, "durable": True, "auto_delete": False,
                                       "args": encode_args({"x-max-length": 5}), "id": 7, "leader": leader})


def test_definitions_of_another_node_are_applied_here_without_being_written_again(broker: Broker) -> None:
    store: NodeStore = broker.store  # type: ignore[assignment]
    store.writes.clear()
    apply_change(broker, "exchange.add", {"vhost": "/", "name": "x", "type": "topic", "durable": True,
                                          "auto_delete": False, "internal": False, "args": None})
    _queue_added(broker, "q", "a")
    apply_change(broker, "binding.add", {"vhost": "/", "source": "x", "dest": "q", "dest_is_exchange": False,
                                         "key": "k.#", "args": None})
    user = UserRecord("app", "hash")
    apply_change(broker, "doc.put", {"kind": "user", "key": "app", "doc": json.dumps(user.to_json())})
    vhost = broker.model.vhosts["/"]
    q = vhost.queues["q"]
    assert q.leader == "a" and q.args == {"x-max-length": 5} and store.ids[("/", "q")] == 7
    assert broker.model.security.users["app"].password_hash == "hash"
    assert store.writes == []  # muted: it is in the database already
    # a publish routed here to the queue a leads goes to the outbox, as a store write
    before = broker.model.store_writes
    msg = Message(1, "x", "k.1", {}, b"body", persistent=True)
    broker.model.publish(vhost, "x", msg)
    assert store.outbox == [(1, "a", "/", "q", msg)] and q.count == 0  # with the token its confirm waits on
    assert broker.model.store_writes == before + 1
    apply_change(broker, "binding.delete", {"vhost": "/", "source": "x", "dest": "q", "dest_is_exchange": False,
                                            "key": "k.#", "args": None})
    assert broker.model.publish(vhost, "x", Message(2, "x", "k.1", {}, b"")) == 0
    apply_change(broker, "queue.delete", {"vhost": "/", "name": "q"})
    assert "q" not in vhost.queues and ("/", "q") not in store.ids


def test_a_change_that_no_longer_applies_is_logged_not_raised(broker: Broker, caplog) -> None:
    apply_change(broker, "exchange.add", {"vhost": "/", "name": "x", "type": "topic", "durable": True,
                                          "auto_delete": False, "internal": False, "args": None})
    apply_change(broker, "exchange.add", {"vhost": "/", "name": "x", "type": "fanout", "durable": True,
                                          "auto_delete": False, "internal": False, "args": None})
    assert broker.model.vhosts["/"].exchanges["x"].type == "topic"
    assert "not applied" in caplog.text
    apply_change(broker, "no.such", {})
    assert "unknown definition change" in caplog.text


def test_take_over_loads_the_queue_and_step_down_gives_it_up(broker: Broker) -> None:
    _queue_added(broker, "q", "a")
    q = broker.model.vhosts["/"].queues["q"]
    take_over(broker, ("/", "q"), [StoredMessage(Message(10, "", "q", {}, b"m1", persistent=True), 1),
                                   StoredMessage(Message(11, "", "q", {}, b"m2", persistent=True), 1)], 3)
    assert q.leader is None and q.count == 2 and "adopt q 3" in broker.store.writes  # type: ignore[attr-defined]
    owner = Owner()
    broker.model.consume(q, Consumer(q, owner, prefetch=1))
    broker.model.dispatch()
    assert [e.msg.body for _, e in owner.got] == [b"m1"] and owner.got[0][1].count == 1  # redelivered
    removed: list[int] = []
    broker.store.remove = lambda vhost, queue, msg_id: removed.append(msg_id)  # type: ignore[method-assign]
    step_down(broker, [("/", "q")], "c")
    assert q.leader == "c" and q.count == 0 and not q.consumers and owner.cancelled == 1
    assert broker.model.queued_bytes == 0
    assert removed == []  # the stored messages are the new leader's: a step-down never removes them


def test_a_remote_queue_is_consumed_through_a_relay(broker: Broker) -> None:
    opened: list[Relay] = []
    relays = broker.model.relays = Relays(broker.model, opened.append)
    _queue_added(broker, "q", "a")
    q = broker.model.vhosts["/"].queues["q"]
    owner = Owner()
    consumer = broker.model.consume(q, Consumer(q, owner, prefetch=2))
    assert [r.queue for r in opened] == [q]  # the first consumer opens the relay
    idle = Owner()
    idle.blocked = True  # takes nothing: the deliveries below all go to the first consumer
    broker.model.consume(q, Consumer(q, idle))
    assert len(opened) == 1
    relay = opened[0]
    for tag in (101, 102, 103):
        relays.delivered(relay, tag, tag == 103, "ex", "rk", {"h": 1}, b"b%d" % tag, True, 0)
    broker.model.dispatch()
    assert [e.msg.body for _, e in owner.got] == [b"b101", b"b102"]
    assert (owner.got[0][1].msg.exchange, owner.got[0][1].msg.routing_key) == ("ex", "rk")
    broker.model.ack(consumer, owner.got[0][0])
    assert list(relay.acks) == [101]  # acked here: acked on the leader
    broker.model.nack(consumer, owner.got[1][0], requeue=True)  # requeued here: stays here
    assert list(relay.acks) == [101]
    # the last consumers go: what is ready here is dropped unacked (the leader requeues it)
    for c in list(q.consumers or ()):
        broker.model.cancel(c)
    assert not relay.active and q.count == 0  # stopped by the last cancel
    assert relays.idle(relay)
    assert broker.model.queued_bytes == 0
    relays.delivered(relay, 104, False, "", "q", {}, b"late", True, 0)  # after the stop: ignored
    assert q.count == 0


def test_a_relay_waits_for_deliveries_a_cancelled_consumer_may_still_ack(broker: Broker) -> None:
    """basic.cancel leaves the consumer's deliveries unacked with it: the relay stays until they are
    settled, so their acks still reach the leader."""
    opened: list[Relay] = []
    relays = broker.model.relays = Relays(broker.model, opened.append)
    _queue_added(broker, "q", "a")
    q = broker.model.vhosts["/"].queues["q"]
    owner = Owner()
    consumer = broker.model.consume(q, Consumer(q, owner))
    relay = opened[0]
    relays.delivered(relay, 7, False, "", "q", {}, b"x", True, 0)
    broker.model.dispatch()
    broker.model.cancel(consumer, keep_unacked=True)
    assert relay.active and not relays.idle(relay)
    broker.model.ack(consumer, owner.got[0][0])
    assert list(relay.acks) == [7]
    assert relays.idle(relay)
