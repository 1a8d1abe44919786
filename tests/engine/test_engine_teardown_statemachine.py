"""Auto-delete, exclusive and exchange-to-exchange teardown paths against a reference model of
RabbitMQ's rules (hypothesis state machine over declare/bind/unbind/delete/consume/cancel/close):

- an auto-delete exchange goes when its last binding *as a source* goes (by unbind, or because the
  destination queue or exchange was deleted), and that can cascade;
- an auto-delete queue goes when its last consumer is cancelled;
- an exclusive queue goes when its connection closes (after the connection's consumers are cancelled);
- deleting an exchange removes every binding it is the source or the destination of.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine import Consumer, MemoryStore
from engine._timers import TimerQueue
from engine.model import STANDARD_EXCHANGES, Exchange, Model, Queue
from engine.model.trace import TRACE_EXCHANGE

EXCHANGES = ("a", "b", "c")
QUEUES = ("q1", "q2", "q3")
KEYS = ("k1", "k2")
CONNS = (1, 2)
STANDARD = {"", *(name for name, _ in STANDARD_EXCHANGES), TRACE_EXCHANGE}


class Owner:
    """A connection as the model sees it (a ConsumerOwner)."""

    def __init__(self, conn: int) -> None:
        self.conn = conn
        self.blocked = False

    def deliver(self, consumer, tag, entry):
        pass

    def consumer_cancelled(self, consumer):
        pass

    def delivery_timed_out(self, consumer, tag):
        pass


class Ref:
    """RabbitMQ's teardown rules over plain sets."""

    def __init__(self) -> None:
        self.exchanges: dict[str, bool] = {}  # name -> auto_delete
        self.queues: dict[str, tuple[bool, int | None]] = {}  # name -> (auto_delete, owner conn)
        #: (source, "q" | "x", destination, key)
        self.bindings: set[tuple[str, str, str, str]] = set()
        self.consumers: dict[int, tuple[str, int]] = {}  # consumer id -> (queue, conn)

    def maybe_auto_delete_exchange(self, name: str) -> None:
        if self.exchanges.get(name) and not any(b[0] == name for b in self.bindings):
            self.delete_exchange(name)

    def delete_exchange(self, name: str) -> None:
        del self.exchanges[name]
        gone = {b for b in self.bindings if b[0] == name or (b[1] == "x" and b[2] == name)}
        self.bindings -= gone
        for src in sorted({b[0] for b in gone if b[0] != name}):
            self.maybe_auto_delete_exchange(src)

    def delete_queue(self, name: str) -> None:
        del self.queues[name]
        gone = {b for b in self.bindings if b[1] == "q" and b[2] == name}
        self.bindings -= gone
        for cid in [cid for cid, (q, _) in self.consumers.items() if q == name]:
            del self.consumers[cid]
        for src in sorted({b[0] for b in gone}):
            self.maybe_auto_delete_exchange(src)

    def unbind(self, b: tuple[str, str, str, str]) -> None:
        if b in self.bindings:
            self.bindings.discard(b)
            self.maybe_auto_delete_exchange(b[0])

    def cancel(self, cid: int) -> None:
        qname, _ = self.consumers.pop(cid)
        if qname in self.queues and self.queues[qname][0] and \
                not any(q == qname for q, _ in self.consumers.values()):
            self.delete_queue(qname)

    def close(self, conn: int) -> None:
        for cid in [cid for cid, (_, c) in self.consumers.items() if c == conn]:
            if cid in self.consumers:
                self.cancel(cid)
        for name in [n for n, (_, owner) in self.queues.items() if owner == conn]:
            if name in self.queues:
                self.delete_queue(name)


class TeardownMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.model = Model(MemoryStore(), TimerQueue())
        self.vhost = self.model.add_vhost("/")
        self.ref = Ref()
        self.owners = {c: Owner(c) for c in CONNS}
        self.consumers: dict[int, Consumer] = {}
        self.next_cid = 0

    # -- helpers -----------------------------------------------------------------------------------
    def _x(self, name: str) -> Exchange:
        return self.vhost.exchanges[name]

    def _q(self, name: str) -> Queue:
        return self.vhost.queues[name]

    # -- rules ---------------------------------------------------------------------------------------
    @rule(name=st.sampled_from(EXCHANGES), auto_delete=st.booleans(),
          type=st.sampled_from(("direct", "topic", "fanout")))
    def declare_exchange(self, name: str, auto_delete: bool, type: str) -> None:
        if name in self.ref.exchanges:
            return  # a redeclare changes nothing (the channel checks equivalence)
        self.model.declare_exchange(self.vhost, name, type, False, auto_delete)
        self.ref.exchanges[name] = auto_delete

    @rule(name=st.sampled_from(EXCHANGES))
    def delete_exchange(self, name: str) -> None:
        if name not in self.ref.exchanges:
            return
        self.model.delete_exchange(self.vhost, name)
        self.ref.delete_exchange(name)

    @rule(name=st.sampled_from(QUEUES), auto_delete=st.booleans(), owner=st.sampled_from((None, *CONNS)))
    def declare_queue(self, name: str, auto_delete: bool, owner: int | None) -> None:
        if name in self.ref.queues:
            return
        self.model.declare_queue(self.vhost, name, False, auto_delete,
                                 self.owners[owner] if owner else None)
        self.ref.queues[name] = (auto_delete, owner)

    @rule(name=st.sampled_from(QUEUES))
    def delete_queue(self, name: str) -> None:
        if name not in self.ref.queues:
            return
        self.model.delete_queue(self._q(name))
        self.ref.delete_queue(name)

    @rule(src=st.sampled_from(EXCHANGES), q=st.sampled_from(QUEUES), key=st.sampled_from(KEYS))
    def bind_queue(self, src: str, q: str, key: str) -> None:
        if src not in self.ref.exchanges or q not in self.ref.queues:
            return
        self.model.bind(self.vhost, self._q(q), self._x(src), key)
        self.ref.bindings.add((src, "q", q, key))

    @rule(src=st.sampled_from(EXCHANGES), q=st.sampled_from(QUEUES), key=st.sampled_from(KEYS))
    def unbind_queue(self, src: str, q: str, key: str) -> None:
        if src not in self.ref.exchanges or q not in self.ref.queues:
            return
        self.model.unbind(self.vhost, self._q(q), self._x(src), key)
        self.ref.unbind((src, "q", q, key))

    @rule(src=st.sampled_from(EXCHANGES), dst=st.sampled_from(EXCHANGES), key=st.sampled_from(KEYS))
    def bind_exchange(self, src: str, dst: str, key: str) -> None:
        if src not in self.ref.exchanges or dst not in self.ref.exchanges:
            return
        self.model.bind(self.vhost, self._x(dst), self._x(src), key)
        self.ref.bindings.add((src, "x", dst, key))

    @rule(src=st.sampled_from(EXCHANGES), dst=st.sampled_from(EXCHANGES), key=st.sampled_from(KEYS))
    def unbind_exchange(self, src: str, dst: str, key: str) -> None:
        if src not in self.ref.exchanges or dst not in self.ref.exchanges:
            return
        self.model.unbind(self.vhost, self._x(dst), self._x(src), key)
        self.ref.unbind((src, "x", dst, key))

    @rule(q=st.sampled_from(QUEUES), conn=st.sampled_from(CONNS))
    def consume(self, q: str, conn: int) -> None:
        if q not in self.ref.queues or self.ref.queues[q][1] not in (None, conn):
            return
        queue = self._q(q)
        self.next_cid += 1
        consumer = Consumer(queue, self.owners[conn])
        self.model.consume(queue, consumer)
        self.consumers[self.next_cid] = consumer
        self.ref.consumers[self.next_cid] = (q, conn)

    @precondition(lambda self: self.ref.consumers)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(sorted(self.ref.consumers)))
        self.model.cancel(self.consumers.pop(cid))
        self.ref.cancel(cid)

    @rule(conn=st.sampled_from(CONNS))
    def close_connection(self, conn: int) -> None:
        """What AmqpSession.teardown does: cancel the connection's consumers, then delete its
        exclusive queues."""
        for cid in [cid for cid, (_, c) in self.ref.consumers.items() if c == conn]:
            if cid in self.ref.consumers:
                self.model.cancel(self.consumers.pop(cid))
        for q in [q for q in self.vhost.queues.values() if q.exclusive_owner is self.owners[conn]]:
            self.model.delete_queue(q)
        self.ref.close(conn)
        self.consumers = {cid: c for cid, c in self.consumers.items() if cid in self.ref.consumers}

    # -- invariants ------------------------------------------------------------------------------------
    @invariant()
    def same_entities(self) -> None:
        if not hasattr(self, "ref"):
            return
        assert set(self.vhost.exchanges) - STANDARD == set(self.ref.exchanges)
        assert set(self.vhost.queues) == set(self.ref.queues)
        for name, q in self.vhost.queues.items():
            assert q.auto_delete == self.ref.queues[name][0]

    @invariant()
    def same_bindings(self) -> None:
        if not hasattr(self, "ref"):
            return
        got = set()
        for x in self.vhost.exchanges.values():
            for dest, key, _ in x.router.bindings():
                kind = "q" if isinstance(dest, Queue) else "x"
                # a binding never points at something deleted
                live = self.vhost.queues if kind == "q" else self.vhost.exchanges
                assert live.get(dest.name) is dest, (x.name, dest)
                got.add((x.name, kind, dest.name, key))
        assert got == self.ref.bindings
        for q in self.vhost.queues.values():  # the queue's own list mirrors the routers
            own = {(x.name, "q", q.name, key) for x, key, _ in q.bindings or ()}
            assert own == {b for b in got if b[1] == "q" and b[2] == q.name}

    @invariant()
    def same_consumers(self) -> None:
        if not hasattr(self, "ref"):
            return
        got = {(q.name, c.owner.conn) for q in self.vhost.queues.values() for c in q.consumers or ()}
        want = {(q, conn) for q, conn in self.ref.consumers.values()}
        assert got == want
        assert sum(q.consumer_count() for q in self.vhost.queues.values()) == len(self.ref.consumers)


TestTeardown = TeardownMachine.TestCase
TestTeardown.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_issue_scenario_cascade_through_exchange_binding() -> None:
    """Issue 17 item 1: unbinding the queue from auto-delete ``dst`` deletes ``dst``, which takes
    the ``src -> dst`` binding, which deletes auto-delete ``src`` (no error while cascading)."""
    model = Model(MemoryStore(), TimerQueue())
    vhost = model.add_vhost("/")
    src = model.declare_exchange(vhost, "src", "direct", False, True)
    dst = model.declare_exchange(vhost, "dst", "direct", False, True)
    q = model.declare_queue(vhost, "amq.gen-1", False, True)
    model.bind(vhost, q, dst, "rk")
    model.bind(vhost, dst, src, "rk")
    model.unbind(vhost, q, dst, "rk")
    assert "dst" not in vhost.exchanges and "src" not in vhost.exchanges
    assert not list(src.router.bindings()) and not list(dst.router.bindings())
    assert q.bindings is None
