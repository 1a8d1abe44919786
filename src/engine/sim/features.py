"""Actors for the broker's features beyond plain queues: AMQP transactions (publishes and acks
committed or rolled back), a priority publisher, a delayed-message publisher, a stream publisher
with dedup ids that resends, and topology churn (queues and exchanges declared, bound, unbound and
deleted while messages flow). Each reports to the ``Oracle`` what it must check."""

from __future__ import annotations

from collections import deque
from typing import Any

from amqpproto import spec

from .oracle import Oracle
from .workload import DEAD, DELAY_EXCHANGE, DELAYED, DLQ, PRIO, STREAM, TXQ, AmqpConsumer, AmqpPublisher
from .world import SimWorld

__all__ = ["CHURN_EXCHANGE", "DELAYS_MS", "Churner", "DedupPublisher", "DelayedPublisher", "PriorityPublisher",
           "TxConsumer", "TxPublisher", "delay_of", "feature_actors", "priority_of"]

#: the delays a delayed publisher cycles through (ms): at once, soon, later, after a clock jump
DELAYS_MS = (0, 500, 2000, 10_000)
CHURN_EXCHANGE = "xchurn"


def priority_of(mid: int) -> int:
    return mid % 10  # 0-9: x-max-priority is 9


def delay_of(mid: int) -> int:
    return DELAYS_MS[mid % len(DELAYS_MS)]


class TxPublisher(AmqpPublisher):
    """Publishes on a transactional channel; ``finish(commit)`` commits or rolls back what it
    published since. tx.commit-ok (sent once the store synced) is its confirm."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle) -> None:
        super().__init__(name, world, oracle, confirms=False)
        self._open: list[int] = []  # published in the transaction now open
        self._committing: deque[list[int]] = deque()  # commits sent, commit-ok awaited

    def setup(self) -> None:
        super().setup()
        self.client.send(spec.TxSelect(channel=1))

    def published_as(self, mid: int, queue: str) -> dict[str, Any]:
        return {"tx": True}

    def sent(self, mid: int) -> None:
        self._open.append(mid)

    def finish(self, commit: bool) -> None:
        if not self.alive():
            self.collect()
            return
        mids, self._open = self._open, []
        if commit:
            self.oracle.committing(mids)
            self._committing.append(mids)
            self.client.send(spec.TxCommit(channel=1))
        else:
            self.client.send(spec.TxRollback(channel=1))
            self.oracle.rolled_back_tx(mids)
        self.world.run()

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, spec.TxCommitOk) and self._committing:
            for mid in self._committing.popleft():
                self.oracle.confirm(mid)

    def lost(self) -> None:
        # the broker discards an open transaction with its channel; a commit sent may or may not have run
        self.oracle.rolled_back_tx(self._open)
        self._open = []
        self._committing.clear()

    def unanswered(self) -> int:
        return len(self._committing) if self.alive() else 0


class TxConsumer(AmqpConsumer):
    """Acks on a transactional channel: ``settle_tx(n, commit)`` acks its ``n`` oldest deliveries
    and commits (they are settled) or rolls back (they are unacked again, RabbitMQ's tx.rollback)."""

    def setup(self) -> None:
        super().setup()
        self.client.send(spec.TxSelect(channel=1))

    def settle_tx(self, n: int, commit: bool) -> None:
        if not self.ensure():
            return
        taken = [self.unacked.popleft() for _ in range(min(n, len(self.unacked)))]
        for tag, _ in taken:
            self.client.send(spec.BasicAck(delivery_tag=tag, channel=1))
        self.client.send(spec.TxCommit(channel=1) if commit else spec.TxRollback(channel=1))
        self.world.run()
        if not commit:
            self.unacked.extendleft(reversed(taken))
            return
        for _, mid in taken:
            self.oracle.settle(mid, self.alive())


class PriorityPublisher(AmqpPublisher):
    """Persistent publishes with confirms and priorities 0-9 to the priority queue."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle) -> None:
        super().__init__(name, world, oracle, confirms=True)

    def published_as(self, mid: int, queue: str) -> dict[str, Any]:
        return {"priority": priority_of(mid)}

    def properties(self, mid: int, queue: str) -> spec.BasicProperties:
        return spec.BasicProperties(delivery_mode=2, priority=priority_of(mid))


class DelayedPublisher(AmqpPublisher):
    """Persistent publishes with confirms through the delayed exchange, each with an ``x-delay``."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle) -> None:
        super().__init__(name, world, oracle, confirms=True)

    def published_as(self, mid: int, queue: str) -> dict[str, Any]:
        return {"not_before": self.world.now + delay_of(mid) / 1000}

    def route(self, queue: str) -> tuple[str, str]:
        return DELAY_EXCHANGE, DELAYED

    def properties(self, mid: int, queue: str) -> spec.BasicProperties:
        return spec.BasicProperties(delivery_mode=2, headers={"x-delay": delay_of(mid)})


class DedupPublisher(AmqpPublisher):
    """Publishes to the stream with ``x-producer`` and increasing ``x-publishing-id``s (kept across
    reconnections, as an application would); ``resend(k)`` publishes its last ``k`` messages again
    with their ids, as a producer that never got their confirms does: none may be appended twice."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle) -> None:
        super().__init__(name, world, oracle, confirms=True)
        self._pid: dict[int, int] = {}  # message id -> its publishing id
        self._sent: list[int] = []
        #: sent and not confirmed, in order: resent first on a new connection (RabbitMQ's dedup
        #: drops an id below the last stored one, so a producer resends before it goes on)
        self._unconfirmed: dict[int, None] = {}
        self._given_up: set[int] = set()  # nacked: never sent again

    def setup(self) -> None:
        super().setup()
        for mid in list(self._unconfirmed):
            self.send_message(mid, STREAM)

    def published_as(self, mid: int, queue: str) -> dict[str, Any]:
        self._pid.setdefault(mid, len(self._pid) + 1)
        return {}

    def properties(self, mid: int, queue: str) -> spec.BasicProperties:
        return spec.BasicProperties(delivery_mode=2, headers={"x-producer": self.name,
                                                              "x-publishing-id": self._pid[mid]})

    def sent(self, mid: int) -> None:
        super().sent(mid)
        self._unconfirmed.setdefault(mid, None)
        if mid not in self._sent[-8:]:
            self._sent.append(mid)

    def confirmed(self, mid: int) -> None:
        self._unconfirmed.pop(mid, None)
        self._given_up.add(mid)
        super().confirmed(mid)

    def nacked(self, mid: int) -> None:
        # refused, fate unknown (a failed fsync may still have written it): given up, as the other
        # publishers do. Sent again under its id it could be dropped as a duplicate of a later
        # stored id, under a new id it could be there twice
        self._unconfirmed.pop(mid, None)
        self._given_up.add(mid)

    def resend(self, k: int) -> None:
        """Its last ``k`` messages again (confirmed ones too: the broker must drop those)."""
        if not self.ensure():
            return
        for mid in self._sent[-k:]:
            if mid not in self._given_up:
                self.send_message(mid, STREAM)
        self.world.run()


class Churner(AmqpPublisher):
    """Topology churn: declares durable queues bound to a fanout exchange, publishes through it,
    unbinds, deletes queues, deletes and declares the exchange again, all while the other actors'
    traffic flows. A deleted queue is reported to the oracle: it must never come back with its
    messages once its deletion was durable."""

    def __init__(self, name: str, world: SimWorld, oracle: Oracle) -> None:
        super().__init__(name, world, oracle, confirms=False)
        self.live: list[str] = []  # its queues, oldest first
        self.made = 0
        #: body bytes published into its queues (the memory bound allows them)
        self.bytes = 0

    def setup(self) -> None:
        super().setup()
        self._declare_exchange()

    def _declare_exchange(self) -> None:
        self.client.send(spec.ExchangeDeclare(exchange=CHURN_EXCHANGE, type="fanout", durable=True, channel=1))

    def churn(self, op: str, n: int) -> None:
        if not self.ensure():
            return
        c = self.client
        if op == "declare":
            self.made += 1
            name = f"tmp{self.made}"
            c.send(spec.QueueDeclare(queue=name, durable=True, channel=1))
            c.send(spec.QueueBind(queue=name, exchange=CHURN_EXCHANGE, channel=1))
            self.live.append(name)
        elif op == "publish":
            body = b"churn"
            for _ in range(n):
                c.send(spec.BasicPublish(exchange=CHURN_EXCHANGE, routing_key="", body=body, channel=1,
                                         properties=spec.BasicProperties(delivery_mode=2)))
            self.bytes += n * len(body) * max(1, len(self.live))
        elif op == "unbind" and self.live:
            c.send(spec.QueueUnbind(queue=self.live[0], exchange=CHURN_EXCHANGE, channel=1))
        elif op == "delete" and self.live:
            name = self.live.pop(0)
            before = len(c.received)
            c.send(spec.QueueDelete(queue=name, channel=1))
            self.world.run()
            if any(isinstance(ev, spec.QueueDeleteOk) for ev in c.received[before:]):
                self.oracle.queue_deleted(name)
        elif op == "exchange":
            c.send(spec.ExchangeDelete(exchange=CHURN_EXCHANGE, channel=1))
            self._declare_exchange()
            for name in self.live:
                c.send(spec.QueueBind(queue=name, exchange=CHURN_EXCHANGE, channel=1))
        self.world.run()


def feature_actors(world: SimWorld, oracle: Oracle) -> dict[str, Any]:
    return {
        "ptx": TxPublisher("ptx", world, oracle),
        "ctx": TxConsumer("ctx", world, oracle, TXQ, prefetch=4),
        "pp": PriorityPublisher("pp", world, oracle),
        "cp": AmqpConsumer("cp", world, oracle, PRIO, prefetch=1),
        "pdl": DelayedPublisher("pdl", world, oracle),
        "cq": AmqpConsumer("cq", world, oracle, DELAYED, prefetch=5),
        "pdd": DedupPublisher("pdd", world, oracle),
        "cd": AmqpConsumer("cd", world, oracle, DLQ, prefetch=2),
        "cx": AmqpConsumer("cx", world, oracle, DEAD, prefetch=5),
        "tc": Churner("tc", world, oracle),
    }
