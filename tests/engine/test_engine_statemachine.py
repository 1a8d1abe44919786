"""Hypothesis state machines comparing the engine with a small reference model of queue semantics:
publish, consume (with prefetch), ack, nack (requeue or drop), cancel/disconnect -> requeue in
order; highest priority first, FIFO within a level, requeued messages back at their original
position in their level (RabbitMQ's);
nothing lost, nothing duplicated beyond redelivery."""

import shutil
import tempfile
from bisect import insort
from collections import deque

from enginetest_helpers import ack, connected, messages, nack, new_net, send, subscribe
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine import PUBLISH_ROUTED, PUBLISH_WROTE, Consumer, MemoryStore, Message
from engine._timers import TimerQueue
from engine.model import Model
from engine.segment_store import SegmentStore
from engine.testing import FakeStore


class Owner:
    """A ConsumerOwner recording deliveries in global order."""

    def __init__(self, log):
        self.blocked = False
        self.log = log

    def deliver(self, consumer, tag, entry):
        self.log.append((consumer, tag, entry.msg.id, entry.count))

    def consumer_cancelled(self, consumer):
        pass

    def delivery_timed_out(self, consumer, tag):
        pass


class ModelMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.model = Model(MemoryStore(), TimerQueue())
        self.vhost = self.model.add_vhost("/")
        self.queue = self.model.declare_queue(self.vhost, "q")
        self.log = []
        self.consumers = []  # live engine consumers
        # reference
        self.ready = {p: deque() for p in range(10)}
        self.returned = {}  # msg id -> times returned
        self.unacked = {}  # consumer -> dict tag -> msg id (delivery order)
        self.prefetch = {}
        self.published = 0
        self.finished = set()  # acked or dropped
        self.prio_of = {}

    # -- reference helpers ----------------------------------------------------------------------
    def _ref_pop(self):
        for p in range(9, -1, -1):
            if self.ready[p]:
                return self.ready[p].popleft()
        return None

    def _prio(self, msg_id):
        return self.prio_of[msg_id]


    def _settle(self):
        self.model.dispatch()
        for consumer, tag, msg_id, count in self.log:
            expected = self._ref_pop()
            assert expected == msg_id, (expected, msg_id)
            assert consumer in self.unacked, "delivered to a cancelled consumer"
            limit = self.prefetch[consumer]
            assert not limit or len(self.unacked[consumer]) < limit, "prefetch exceeded"
            assert count == self.returned.get(msg_id, 0)
            self.unacked[consumer][tag] = msg_id
        self.log.clear()
        # nothing left undelivered while some consumer has room
        if any(self.ready[p] for p in range(10)):
            for c in self.consumers:
                limit = self.prefetch[c]
                assert limit and len(self.unacked[c]) >= limit

    # -- rules ----------------------------------------------------------------------------------
    @rule(priority=st.integers(0, 9))
    def publish(self, priority):
        msg = Message(self.model.next_message_id(), "", "q", {}, b"", priority)
        self.prio_of[msg.id] = priority
        self.published += 1
        assert self.model.publish(self.vhost, "", msg) == PUBLISH_ROUTED
        self.ready[priority].append(msg.id)
        self._settle()

    @rule(prefetch=st.sampled_from([0, 1, 2, 3]))
    def consume(self, prefetch):
        if len(self.consumers) >= 4:
            return
        c = Consumer(self.queue, Owner(self.log), prefetch)
        self.model.consume(self.queue, c)
        self.consumers.append(c)
        self.unacked[c] = {}
        self.prefetch[c] = prefetch
        self._settle()

    def _pick(self, data):
        candidates = [(c, t) for c in self.consumers for t in self.unacked[c]]
        if not candidates:
            return None
        return data.draw(st.sampled_from(candidates))

    @rule(data=st.data())
    def ack_one(self, data):
        picked = self._pick(data)
        if picked is None:
            return
        c, tag = picked
        assert self.model.ack(c, tag)
        self.finished.add(self.unacked[c].pop(tag))
        self._settle()

    @rule(data=st.data(), requeue=st.booleans())
    def nack_one(self, data, requeue):
        picked = self._pick(data)
        if picked is None:
            return
        c, tag = picked
        assert self.model.nack(c, tag, False, requeue)
        msg_id = self.unacked[c].pop(tag)
        if requeue:
            self.returned[msg_id] = self.returned.get(msg_id, 0) + 1
            insort(self.ready[self._prio(msg_id)], msg_id)  # ids are in publish order
        else:
            self.finished.add(msg_id)
        self._settle()

    @rule(data=st.data())
    def ack_multiple(self, data):
        picked = self._pick(data)
        if picked is None:
            return
        c, tag = picked
        assert self.model.ack(c, tag, multiple=True)
        for t in list(self.unacked[c]):
            self.finished.add(self.unacked[c].pop(t))
            if t == tag:
                break
        self._settle()

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def cancel(self, data):
        c = data.draw(st.sampled_from(self.consumers))
        self.model.cancel(c, requeue=True)
        self.consumers.remove(c)
        for msg_id in reversed(list(self.unacked.pop(c).values())):
            self.returned[msg_id] = self.returned.get(msg_id, 0) + 1
            insort(self.ready[self._prio(msg_id)], msg_id)  # ids are in publish order
        del self.prefetch[c]
        self._settle()

    @invariant()
    def conservation(self):
        if not hasattr(self, "model"):
            return
        ready = sum(len(d) for d in self.ready.values())
        unacked = sum(len(u) for u in self.unacked.values())
        assert ready + unacked + len(self.finished) == self.published
        assert self.queue.count == ready
        assert [e.msg.id for e in self.queue.ready_entries()] + [
            m.id for m in self.model.paged_messages(self.queue)
        ] == [m for p in range(9, -1, -1) for m in self.ready[p]]
        assert self.queue.unacked_count() == unacked


TestModelMachine = ModelMachine.TestCase


class PagedModelMachine(ModelMachine):
    """The same reference, on a durable queue with a window of 1-3 messages so nearly every message
    goes through the store's page: over the Store defaults (FakeStore) and over SegmentStore, with
    persistent and transient messages, basic.get and purge."""

    @initialize(window=st.sampled_from([3, 2, 1]), segments=st.booleans())
    def setup(self, window, segments):
        self.tmp = tempfile.mkdtemp(prefix="paged-sm-") if segments else None
        store = SegmentStore(self.tmp) if segments else FakeStore()
        self.model = Model(store, TimerQueue())
        self.model.page_window = window
        self.vhost = self.model.add_vhost("/")
        self.queue = self.model.declare_queue(self.vhost, "q", durable=True)
        self.log = []
        self.consumers = []
        self.ready = {p: deque() for p in range(10)}
        self.returned = {}
        self.unacked = {}
        self.prefetch = {}
        self.published = 0
        self.finished = set()
        self.prio_of = {}

    def teardown(self):
        if getattr(self, "model", None) is not None:
            self.model.store.close()
        if getattr(self, "tmp", None):
            shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(priority=st.just(0), persistent=st.booleans())
    def publish(self, priority, persistent=False):
        msg = Message(self.model.next_message_id(), "", "q", {}, b"%d" % self.published, priority,
                      persistent=persistent)
        self.prio_of[msg.id] = priority
        self.published += 1
        wrote = PUBLISH_WROTE if persistent and self.model.store.needs_sync else 0
        assert self.model.publish(self.vhost, "", msg) == PUBLISH_ROUTED | wrote
        self.ready[priority].append(msg.id)
        self._settle()

    @rule(n=st.integers(2, 8), persistent=st.booleans())
    def publish_burst(self, n, persistent):
        for _ in range(n):
            self.publish(0, persistent)

    @rule()
    def get(self):
        holder = Consumer(self.queue, Owner([]), 0, True)
        got = self.model.get(self.queue, holder)
        expected = self._ref_pop()
        assert (got[1].msg.id if got else None) == expected
        if got:
            assert got[1].msg.body == b"%d" % (expected - 1)
            assert got[1].count == self.returned.get(expected, 0)
            self.finished.add(expected)
        self._settle()

    @rule()
    def purge(self):
        n = sum(len(d) for d in self.ready.values())
        assert self.model.purge(self.queue) == n
        for d in self.ready.values():
            self.finished.update(d)
            d.clear()
        self._settle()

    @invariant()
    def window_bounded(self):
        if hasattr(self, "model"):
            assert len(self.queue.ready_entries()) <= self.model.page_window + sum(self.returned.values())


TestPagedModelMachine = PagedModelMachine.TestCase
TestPagedModelMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


class NetworkMachine(RuleBasedStateMachine):
    """The same semantics end to end through STOMP and SimNetwork: nothing lost, nothing duplicated
    beyond redelivery, redelivered flag exactly on returned messages."""

    @initialize()
    def setup(self):
        self.net = new_net(seed=3, max_chunk=40)
        self.producer = connected(self.net)
        self.clients = []
        self.sent = 0
        self.holding = {}  # client -> {body: MESSAGE}
        self.done = set()
        self.returned = set()
        self.n_conns = 0

    def _collect(self):
        self.net.run_until_idle()
        for cl in self.clients:
            for m in messages(cl):
                body = m.body
                assert body not in self.done, "acked message delivered again"
                for other in self.holding.values():
                    assert body not in other, "message held by two consumers"
                assert (m.headers.get("redelivered") == "true") == (body in self.returned)
                self.holding[cl][body] = m

    @rule()
    def publish(self):
        send(self.producer, "/queue/sm", b"m%d" % self.sent)
        self.sent += 1
        self._collect()

    @rule(prefetch=st.sampled_from(["0", "1", "2"]))
    def join(self, prefetch):
        if len(self.clients) >= 3:
            return
        cl = connected(self.net)
        subscribe(cl, "/queue/sm", "s", ack="client-individual", prefetch_count=prefetch)
        self.clients.append(cl)
        self.holding[cl] = {}
        self._collect()

    @rule(data=st.data(), positive=st.booleans())
    def settle_one(self, data, positive):
        candidates = [(cl, b) for cl in self.clients for b in self.holding[cl]]
        if not candidates:
            return
        cl, body = data.draw(st.sampled_from(candidates))
        msg = self.holding[cl].pop(body)
        if positive:
            ack(cl, msg)
            self.done.add(body)
        else:
            nack(cl, msg)
            self.returned.add(body)
        self._collect()

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), abrupt=st.booleans())
    def leave(self, data, abrupt):
        cl = data.draw(st.sampled_from(self.clients))
        self.clients.remove(cl)
        self.returned.update(self.holding.pop(cl))
        if abrupt:
            cl.drop()
        else:
            cl.close()
        self._collect()

    @invariant()
    def nothing_lost(self):
        if not hasattr(self, "net"):
            return
        q = self.net.broker.model.vhosts["/"].queues.get("sm")
        held = sum(len(h) for h in self.holding.values())
        ready = q.count if q is not None else 0
        assert ready + held + len(self.done) == self.sent


TestNetworkMachine = NetworkMachine.TestCase
TestNetworkMachine.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
