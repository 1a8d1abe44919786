"""The model side of a cluster node (engine.cluster), deterministic, without processes: applying
another node's definition changes, remote queues (publishes go to the outbox), taking a queue over
and stepping down, and consuming a remote queue through a relay."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from enginetest_helpers import confirm_outcomes

from amqpproto import spec
from engine import Broker, Config, MemoryStore
from engine._broker import register_protocol
from engine._message import Entry, Message
from engine.cluster import apply_change, step_down, take_over
from engine.cluster.changes import Muting, encode_args
from engine.cluster.forward import make_forward
from engine.cluster.link import LINK_USER, ClusterLinkSession
from engine.cluster.relay import ACK, REJECT, REQUEUE, Fetched, Relay, Relays
from engine.model import Consumer
from engine.model.security import UserRecord
from engine.store import StoredMessage
from engine.testing import AmqpSimClient, SimNetwork


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


def _queue_added(broker: Broker, name: str, leader: str, args: dict[str, Any] | None = None) -> None:
    apply_change(broker, "queue.add", {"vhost": "/", "name": name, "durable": True, "auto_delete": False,
                                       "args": encode_args(args or {"x-max-length": 5}), "id": 7,
                                       "leader": leader})


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


def _relayed(broker: Broker, name: str = "q", args: dict[str, Any] | None = None, prefetch: int = 0
             ) -> tuple[Relays, Relay, Any, Owner, Consumer]:
    """Queue ``name`` led by node a, consumed here by one consumer: its relay opened."""
    opened: list[Relay] = []
    relays = broker.model.relays = Relays(broker.model, opened.append)
    _queue_added(broker, name, "a", args)
    q = broker.model.vhosts["/"].queues[name]
    owner = Owner()
    consumer = broker.model.consume(q, Consumer(q, owner, prefetch=prefetch))
    return relays, opened[0], q, owner, consumer


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
    assert list(relay.acks) == [(101, ACK)]  # acked here: acked on the leader
    # requeued here: returned to the leader (which counts it), not kept here
    broker.model.nack(consumer, owner.got[1][0], requeue=True)
    assert list(relay.acks) == [(101, ACK), (102, REQUEUE)]
    broker.model.dispatch()
    assert [e.msg.body for _, e in owner.got] == [b"b101", b"b102", b"b103"]
    broker.model.nack(consumer, owner.got[2][0], requeue=False)  # dead-lettered by the leader
    assert list(relay.acks)[-1] == (103, REJECT)
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
    relays, relay, q, owner, consumer = _relayed(broker)
    relays.delivered(relay, 7, False, "", "q", {}, b"x", True, 0)
    broker.model.dispatch()
    broker.model.cancel(consumer, keep_unacked=True)
    assert relay.active and not relays.idle(relay)
    broker.model.ack(consumer, owner.got[0][0])
    assert list(relay.acks) == [(7, ACK)]
    assert relays.idle(relay)


def _stream_added(broker: Broker, name: str, leader: str) -> Any:
    apply_change(broker, "queue.add", {"vhost": "/", "name": name, "durable": True, "auto_delete": False,
                                       "args": encode_args({"x-queue-type": "stream"}), "id": 8, "leader": leader})
    q = broker.model.vhosts["/"].queues[name]
    q.leader = leader  # as mark_remote does once the leases say so
    return q


def test_a_remote_streams_consumers_read_the_shared_log_as_far_as_its_leaders_feed_says(broker: Broker) -> None:
    from engine.model.streams import ConsumerArgs
    from engine.streams import OffsetSpec

    opened: list[Relay] = []
    relays = broker.model.relays = Relays(broker.model, opened.append, broker.model.streams.log)
    q = _stream_added(broker, "s", "a")
    log = broker.model.streams.log(q)
    owner = Owner()
    consumer = Consumer(q, owner, prefetch=10)
    broker.model.consume_stream(q, consumer, ConsumerArgs(OffsetSpec("first"), None))
    assert [(r.queue, r.start) for r in opened] == [(q, 0)]  # a feed from the committed end, not a relay
    for i in range(3):  # the leader's appends, in the shared log, not committed as far as this node knows
        log.append(Message(i + 1, "", "s", {}, b"m%d" % i, 0, None, True), 1.0)
    broker.model.dispatch()
    assert owner.got == []
    relays.followed(opened[0], 2)  # the leader committed offsets 0 and 1
    broker.model.dispatch()
    assert [(e.offset, e.msg.body) for _, e in owner.got] == [(0, b"m0"), (1, b"m1")]  # type: ignore[attr-defined]
    relays.followed(opened[0], 1)  # an old word: nothing new
    relays.followed(opened[0], 3)
    broker.model.dispatch()
    assert [e.msg.body for _, e in owner.got] == [b"m0", b"m1", b"m2"]
    broker.model.ack(consumer, owner.got[0][0])
    assert not opened[0].acks  # acks only open the consumer's prefetch: nothing goes to the leader
    broker.model.cancel(consumer)
    assert not opened[0].active  # no consumer left here: the feed stops


def test_a_stream_changing_leader_keeps_its_consumers_here(broker: Broker) -> None:
    from engine.model.streams import ConsumerArgs
    from engine.streams import OffsetSpec

    opened: list[Relay] = []
    broker.model.relays = Relays(broker.model, opened.append, broker.model.streams.log)
    q = _stream_added(broker, "s", "b")
    q.leader = None  # led here
    owner = Owner()
    broker.model.consume_stream(q, Consumer(q, owner, prefetch=10), ConsumerArgs(OffsetSpec("next"), None))
    assert opened == []
    step_down(broker, [("/", "s")], "c")
    assert q.leader == "c" and owner.cancelled == 0 and q.consumers  # it reads on, fed by c
    assert [(r.queue, r.leader) for r in opened] == [(q, "c")]
    take_over(broker, ("/", "s"), [], 2)
    assert q.leader is None and not opened[0].active and q.consumers


class Link:
    """The link a fetched message came through: records how it was settled."""

    def __init__(self) -> None:
        self.settled: list[tuple[int, bool | None]] = []

    def settle(self, tag: int, requeue: bool | None) -> None:
        self.settled.append((tag, requeue))


def test_basic_get_of_a_remote_queue_is_answered_by_its_leader(broker: Broker) -> None:
    """A get that finds nothing relayed here asks the leader; what it fetched is the getter's alone,
    and settling it here settles it on the leader: ack, requeue (back to the leader), no-ack."""
    asked: list[tuple[str, bool, Any]] = []
    broker.model.relays = relays = Relays(broker.model, lambda relay: None,
                                          fetch=lambda q, no_ack, reply: asked.append((q.name, no_ack, reply)))
    _queue_added(broker, "q", "a")
    net = SimNetwork(broker)
    client = net.connect(protocol="amqp")
    assert isinstance(client, AmqpSimClient)
    client.amqp_open()
    client.open_channel(1)
    link = Link()

    def answer(tag: int, body: bytes, redelivered: bool = False, count: int = 4) -> None:
        reply = asked[-1][2]
        fetched = Fetched(link, tag, redelivered, "ex", "rk", {"h": 1}, body, True, 0, count)
        broker.run_command(lambda b: reply(fetched, None), net.now)
        net.run_until_idle()

    assert client.call(spec.BasicGet(queue="q", channel=1)) is None  # no answer until the leader's
    assert [(n, no_ack) for n, no_ack, _ in asked] == [("q", False)]
    answer(41, b"one", redelivered=True)
    ok = client.last(spec.BasicGetOk)
    assert (ok.body, ok.redelivered, ok.message_count, ok.exchange, ok.routing_key) == (b"one", True, 4, "ex", "rk")
    client.call(spec.BasicAck(delivery_tag=ok.delivery_tag, channel=1))
    assert link.settled == [(41, None)]
    client.call(spec.BasicGet(queue="q", channel=1))
    answer(42, b"two")
    tag = client.last(spec.BasicGetOk).delivery_tag
    client.call(spec.BasicReject(delivery_tag=tag, requeue=True, channel=1))
    assert link.settled[-1] == (42, True) and broker.model.vhosts["/"].queues["q"].count == 0  # not kept here
    client.call(spec.BasicGet(queue="q", no_ack=True, channel=1))
    answer(43, b"three")
    assert client.last(spec.BasicGetOk).body == b"three" and link.settled[-1] == (42, True)  # settled there
    client.call(spec.BasicGet(queue="q", channel=1))
    broker.run_command(lambda b: asked[-1][2](None, None), net.now)
    net.run_until_idle()
    assert isinstance(client.received[-1], spec.BasicGetEmpty)
    # the leader unreachable: the channel is closed with 404, as RabbitMQ's for a node that is down
    client.call(spec.BasicGet(queue="q", channel=1))
    broker.run_command(lambda b: asked[-1][2](None, "connection refused"), net.now)
    net.run_until_idle()
    close = client.last(spec.ChannelClose)
    assert close.reply_code == 404 and "leader node 'a'" in close.reply_text
    # an answer for a channel that closed meanwhile goes back to the leader
    client.open_channel(2)
    client.call(spec.BasicGet(queue="q", channel=2))
    client.call(spec.ChannelClose(200, "bye", 0, 0, channel=2))
    answer(44, b"four")
    assert link.settled[-1] == (44, True) and not relays.fetched
    assert broker.model.queued_bytes == 0


def test_a_policy_queue_leader_locator_places_new_queues_unless_the_argument_says_otherwise(broker: Broker) -> None:
    from engine.model.errors import PreconditionFailed
    from engine.model.policies import Policy

    policies = broker.model.policies
    assert policies.leader_locator("/", "jobs.1", None) is None  # no policy: client-local
    broker.set_policy(Policy("/", "spread", "^jobs\\.", {"queue-leader-locator": "balanced"}, 0, "queues"))
    assert policies.leader_locator("/", "jobs.1", None) == "balanced"
    assert policies.leader_locator("/", "jobs.1", {"x-queue-type": "quorum"}) == "balanced"
    assert policies.leader_locator("/", "other", None) is None
    # the queue's own argument wins over the policy (RabbitMQ 3.10+), the legacy one too
    assert policies.leader_locator("/", "jobs.1", {"x-queue-leader-locator": "client-local"}) == "client-local"
    assert policies.leader_locator("/", "jobs.1", {"x-queue-master-locator": "min-masters"}) == "min-masters"
    broker.set_policy(Policy("/", "classic-only", "^jobs\\.", {"queue-leader-locator": "client-local"}, 5,
                             "classic_queues"))
    assert policies.leader_locator("/", "jobs.1", None) == "client-local"  # the higher priority
    assert policies.leader_locator("/", "jobs.1", {"x-queue-type": "quorum"}) == "balanced"  # its own apply-to
    with pytest.raises(PreconditionFailed, match="queue-leader-locator"):
        broker.set_policy(Policy("/", "bad", ".*", {"queue-leader-locator": "anywhere"}, 0, "all"))


def test_a_relayed_quorum_delivery_carries_the_leaders_count_and_goes_back_there(broker: Broker) -> None:
    """The leader counts a quorum queue's returns: its x-delivery-count is the entry's count here
    (the local delivery carries it), and a return here is a return there, never a local requeue
    that the leader would not count."""
    relays, relay, q, owner, consumer = _relayed(broker, "qq", {"x-queue-type": "quorum", "x-delivery-limit": 2})
    relays.delivered(relay, 5, True, "", "qq", {"x-delivery-count": 2, "h": 1}, b"x", True, 0)
    broker.model.dispatch()
    tag, entry = owner.got[0]
    assert entry.count == 2 and entry.msg.headers == {"h": 1}
    broker.model.nack(consumer, tag, requeue=True)  # the third return: the leader's limit, not ours
    assert list(relay.acks) == [(5, REQUEUE)] and q.count == 0 and broker.model.queued_bytes == 0


def test_a_delivery_orphaned_by_a_stopped_relay_is_never_requeued_here(broker: Broker) -> None:
    """The leader requeued it when the relay's link closed: returned here later (even once this
    node leads the queue), it is dropped, not a second copy."""
    relays, relay, q, owner, consumer = _relayed(broker, prefetch=1)
    relays.delivered(relay, 1, False, "", "q", {}, b"held", True, 0)
    relays.delivered(relay, 2, False, "", "q", {}, b"ready", True, 0)
    broker.model.dispatch()
    take_over(broker, ("/", "q"), [StoredMessage(Message(10, "", "q", {}, b"held", persistent=True), 1),
                                   StoredMessage(Message(11, "", "q", {}, b"ready", persistent=True), 1)], 2)
    assert not relay.active and q.count == 2
    broker.model.nack(consumer, owner.got[0][0], requeue=True)
    assert q.count == 2 and not relays.orphans and not relay.acks
    broker.model.dispatch()
    assert [e.msg.body for _, e in owner.got] == [b"held", b"held"]  # the leader's copy, once
    assert owner.got[1][1].count == 1


def test_a_forwarded_publish_is_confirmed_after_its_leader_and_a_peers_publish_after_the_local_commit(
        broker: Broker) -> None:
    """A publish to a queue led elsewhere is confirmed once its sync is done *and* its leader
    confirmed the forward (``Broker.sync_gate``), never by the local commit alone; a peer's
    publish over the link is confirmed on the local commit whatever this node's own forwards wait
    for (else two nodes forwarding to each other wait on each other), and a peer's message for a
    queue this node does not lead is nacked, not forwarded on."""
    register_protocol(ClusterLinkSession.PROTOCOL, ClusterLinkSession)
    store: NodeStore = broker.store  # type: ignore[assignment]
    store.secret = "s3cret"  # type: ignore[attr-defined]
    _queue_added(broker, "far", "a")
    apply_change(broker, "queue.add", {"vhost": "/", "name": "near", "durable": True, "auto_delete": False,
                                       "args": encode_args({}), "id": 8, "leader": "b"})
    confirmed: set[int] = set()  # the tokens whose forwards the leaders confirmed
    broker.sync_gate = lambda token: min([token, *(t - 1 for t, *_ in store.outbox if t not in confirmed)])
    net = SimNetwork(broker)
    client, link = net.connect(protocol="amqp"), net.connect(protocol="cluster")
    assert isinstance(client, AmqpSimClient) and isinstance(link, AmqpSimClient)
    client.amqp_open()
    assert isinstance(link.amqp_open(LINK_USER, "s3cret"), spec.ConnectionOpenOk)
    for c in (client, link):
        c.open_channel(1)
        c.call(spec.ConfirmSelect(channel=1))
    persistent = spec.BasicProperties(delivery_mode=2)
    client.call(spec.BasicPublish(routing_key="far", properties=persistent, body=b"x", channel=1))
    assert [(leader, q) for _, leader, _, q, _ in store.outbox] == [("a", "far")]
    assert confirm_outcomes(client) == []  # synced here, not yet at its leader
    link.call(spec.BasicPublish(routing_key="near", properties=persistent, body=b"y", channel=1))
    assert confirm_outcomes(link) == [("ack", 1)]  # the local commit is enough for a peer
    link.call(spec.BasicPublish(routing_key="far", properties=persistent, body=b"z", channel=1))
    assert confirm_outcomes(link) == [("ack", 1), ("nack", 2)] and len(store.outbox) == 1
    assert confirm_outcomes(client) == []
    confirmed.add(store.outbox[0][0])  # the leader confirmed: the next settle releases it
    broker.synced(store.outbox[0][0], net.now)
    net.run_until_idle()
    assert confirm_outcomes(client) == [("ack", 1)]
