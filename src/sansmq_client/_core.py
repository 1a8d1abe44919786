"""The client's state across reconnects, shared by every front end; driven from the I/O side only.

The Core remembers what to restore (declarations, consumers and their stream offsets), holds the
operations issued while no connection is ready, picks the next host and the back-off, and starts one
``Session`` per socket. Front ends only move bytes and wake their waiters."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import amqpproto
import stompproto

from ._amqp import AmqpSession
from ._bulk import BatchSink, OnConfirm
from ._errors import ClientError, ConnectionClosedByUser, ConnectionLost, NotSupported
from ._model import ConsumerRecord, Delivery
from ._pending import Pending
from ._session import SETTLE, Session, TxRecord
from ._stomp import StompSession
from ._url import Params

__all__ = ["Core"]

SESSIONS: dict[str, Callable[[Any, float], Session]] = {"amqp": AmqpSession, "stomp": StompSession}
Op = Callable[[Session], "Pending[Any]"]


def _topology_key(kind: str, args: dict[str, Any]) -> tuple[Any, ...] | None:
    """Which remembered declaration an operation adds (or, for deletions, removes); None: neither."""
    if args.get("passive"):
        return None
    if kind in ("exchange", "delete_exchange"):
        return ("exchange", args.get("exchange", ""))
    if kind in ("queue", "delete_queue"):
        return ("queue", args.get("queue", "")) if args.get("queue") else None  # server-named: not restorable
    if kind in ("bind", "unbind"):
        return ("bind", args.get("queue"), args.get("exchange"), args.get("routing_key", ""))
    return None


class Core:
    def __init__(self, params: Params, clock: Callable[[], float]) -> None:
        self.params, self.clock = params, clock
        self.session: Session | None = None
        self.generation = 0
        self.topology: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}
        self.consumers: dict[str, ConsumerRecord] = {}
        self.backlog: list[tuple[Op, Pending[Any]]] = []
        self.connected: Pending[None] = Pending()  # the first ready session, or why there was none
        self.final_error: BaseException | None = None
        self.closing = False  # close() was called: no reconnect after this session
        self.failures = 0
        self.host_index = 0
        self.names = itertools.count(1)
        self.published = 0  # publish_burst's numbers so far (they go on across reconnects)

    # -- the connection's life ---------------------------------------------------------------
    def next_host(self) -> tuple[str, int]:
        host = self.params.hosts[self.host_index % len(self.params.hosts)]
        self.host_index += 1
        return host

    def backoff(self) -> float:
        """Seconds to wait before the next attempt: doubling from reconnect_delay, capped."""
        return float(min(self.params.reconnect_max_delay, self.params.reconnect_delay * 2 ** max(0, self.failures - 1)))

    def attach(self) -> Session:
        self.generation += 1
        self.session = SESSIONS[self.params.protocol](self, self.clock())
        self.session.ready.add_done_callback(self._on_ready)
        return self.session

    def connect_failed(self, error: BaseException) -> None:
        """A socket could not be opened (or died before its session was ready)."""
        self.failures += 1
        if not self.connected.done and self.failures >= len(self.params.hosts):
            # The first connect tries every host once, then fails loudly; later losses retry forever.
            self.finish(ConnectionLost(f"could not connect to any of {list(self.params.hosts)}: {error}"))

    def detach(self, error: BaseException | None = None) -> None:
        """The socket is gone (``error`` says why, if the session did not already know)."""
        session, self.session = self.session, None
        if session is None:
            return
        if session.error is None:
            session.end(error or ConnectionLost("connection lost"))
        if session.fatal or self.closing:  # a close() that crossed the socket's loss ends it for good too
            self.finish(session.error if session.fatal and session.error else ConnectionClosedByUser("closed"))
        elif not self.params.reconnect and session.ready.done and session.ready.error is None:
            self.finish(session.error or ConnectionLost("connection lost"))
        elif not session.ready.done or session.ready.error is not None:
            self.connect_failed(session.error or ConnectionLost("connection lost"))

    def finish(self, error: BaseException) -> None:
        """No more connections: fail whatever waits, end every consumer."""
        if self.final_error is not None:
            return
        self.final_error = error
        if self.session is not None and self.session.error is None:  # e.g. closed during a reconnect
            self.session.end(error, fatal=True)
        self.connected.fail(error)
        backlog, self.backlog = self.backlog, []
        for _, pending in backlog:
            pending.fail(error)
        consumers, self.consumers = self.consumers, {}
        for consumer in consumers.values():
            consumer.end(None if isinstance(error, ConnectionClosedByUser) else error)

    def _on_ready(self, p: Pending[None]) -> None:
        if p.error is not None or self.session is None:
            return
        self.failures = 0
        self.connected.resolve(None)
        backlog, self.backlog = self.backlog, []
        for op, pending in backlog:
            self._start(op, pending)

    @property
    def ready(self) -> bool:
        s = self.session
        return s is not None and s.error is None and s.ready.done and s.ready.error is None

    # -- bytes and timers (the front end's side) ---------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        if self.session is not None and self.session.error is None:
            self.session.receive_data(data, self.clock())

    def get_timer(self) -> float | None:
        return self.session.get_timer() if self.session is not None and self.session.error is None else None

    def handle_timer(self) -> None:
        if self.session is not None and self.session.error is None:
            self.session.handle_timer(self.clock())

    def data_to_send(self) -> bytes | bytearray:
        return self.session.data_to_send() if self.session is not None else b""

    # -- operations (the user's side, already on the I/O side) -----------------------------------
    def run(self, op: Op) -> Pending[Any]:
        """Run ``op`` on the ready session, or keep it until one is ready (after a reconnect)."""
        if self.ready:  # the common case: the session's own outcome, no second Pending in front of it
            try:
                return op(self.session)  # type: ignore[arg-type]
            except ClientError as exc:
                return _failed(exc)
            except (amqpproto.LocalProtocolError, stompproto.LocalProtocolError) as exc:  # e.g. a channel gone
                return _failed(ClientError(f"the codec refused it: {exc}"))
        pending: Pending[Any] = Pending()
        if self.final_error is not None:
            pending.fail(self.final_error)
        else:
            self.backlog.append((op, pending))
        return pending

    def _start(self, op: Op, pending: Pending[Any]) -> None:
        inner = self.run(op)
        inner.add_done_callback(lambda p: pending.fail(p.error) if p.error is not None else pending.resolve(p.value))

    def publish(self, target: str, body: bytes, headers: dict[str, Any], options: dict[str, Any],
                confirm: bool, tx: TxRecord | None = None) -> Pending[None]:
        if tx is not None:
            return self._in_tx(tx, lambda s: s.publish(target, body, headers, options, confirm, tx, self.clock()))
        return self.run(lambda s: s.publish(target, body, headers, options, confirm, None, self.clock()))

    def publish_burst(self, target: str, bodies: Sequence[bytes], headers: dict[str, Any], options: dict[str, Any],
                      on_confirm: OnConfirm | None, confirm_every: int) -> tuple[int, Pending[None]]:
        """Number ``bodies`` and publish them (now, or after a reconnect); the outcome fails at once for a
        call that cannot run (the caller raises it), later ones reach ``on_confirm``."""
        first = self.published + 1
        self.published += len(bodies)
        pending = self.run(lambda s: s.publish_burst(target, bodies, headers, options, first, on_confirm,
                                                     confirm_every, self.clock()))
        if on_confirm is not None and not pending.done:  # held for a reconnect, which may never come
            last = self.published
            pending.add_done_callback(lambda p: p.error is not None and on_confirm(last, True, p.error))
        return first, pending

    def declare(self, kind: str, args: dict[str, Any]) -> Pending[Any]:
        key = _topology_key(kind, args)

        def remember(p: Pending[Any]) -> None:
            if p.error is not None or key is None:
                return
            if kind.startswith("delete") or kind == "unbind":
                self.topology.pop(key, None)
                if kind == "delete_queue":  # its bindings went with it
                    for k in [k for k in self.topology if k[0] == "bind" and k[1] == key[1]]:
                        del self.topology[k]
            else:
                self.topology[key] = (kind, args)

        pending = self.run(lambda s: s.declare(kind, args, self.clock()))
        pending.add_done_callback(remember)
        return pending

    def subscribe(self, source: str, prefetch: int, auto_ack: bool, offset: int | str | None,
                  arguments: dict[str, Any], on_delivery: Callable[[Delivery], None],
                  on_end: Callable[[BaseException | None], None], batch: BatchSink | None = None
                  ) -> tuple[ConsumerRecord, Pending[None]]:
        consumer = ConsumerRecord(f"sansmq-client-{next(self.names)}", source, prefetch, auto_ack, offset,
                                  arguments, on_delivery, on_end, batch=batch)
        self.consumers[consumer.tag] = consumer

        def started(p: Pending[None]) -> None:
            if p.error is not None:
                self.forget_consumer(consumer)
                consumer.end(p.error)
        pending = self.run(lambda s: s.subscribe(consumer, self.clock()))
        pending.add_done_callback(started)
        return consumer, pending

    def forget_consumer(self, consumer: ConsumerRecord) -> None:
        self.consumers.pop(consumer.tag, None)

    def cancel(self, consumer: ConsumerRecord) -> Pending[None]:
        self.forget_consumer(consumer)
        pending = self.run(lambda s: s.cancel(consumer, self.clock()))
        pending.add_done_callback(lambda p: consumer.end(None))
        return pending

    def check_settle(self, delivery: Delivery, tx: TxRecord | None) -> None:
        """Refuse, in the caller's thread, a settle the broker would answer with a channel error."""
        if delivery.consumer.auto_ack:
            raise ClientError("a delivery of an auto_ack subscription is settled already")
        if tx is not None and self.params.protocol == "amqp":
            raise NotSupported("AMQP acks belong to the consumer's channel, not to a transaction's")

    def settle(self, delivery: Delivery, how: str, requeue: bool, tx: TxRecord | None = None) -> None:
        """Ack, nack or reject. A delivery from an earlier connection is not settled: the broker requeued
        it when that connection died and delivers it again (redelivered=True)."""
        assert how in SETTLE
        if delivery.offset is not None:  # "processed", for a stream consumer's resume point
            delivery.consumer.last_offset = delivery.offset
        if self.ready and delivery.generation == self.generation and self.session is not None:
            self.session.settle(delivery, how, requeue, tx, self.clock())

    def is_stale(self, delivery: Delivery) -> bool:
        """A delivery still to be acked whose connection is gone: the broker requeued it (or, for a stream,
        the consumer resumes before it), so handing it to user code would process it twice."""
        return not delivery.consumer.auto_ack and (delivery.generation != self.generation or not self.ready)

    def take(self, item: Any, put_back: Callable[[Any], None], stop: type[Exception]) -> Delivery | None:
        """What a subscription's iteration does with one item of its inbox: a delivery to hand out, None for
        a stale one (skipped), or the end -- ``(marker, error)`` raises the error, or ``stop`` if none."""
        if isinstance(item, tuple):
            put_back(item)  # stay ended for every later call
            raise item[1] if item[1] is not None else stop()
        return None if self.is_stale(item) else item

    def tx_begin(self) -> tuple[TxRecord, Pending[None]]:
        tx = TxRecord(0, f"tx-{next(self.names)}")

        def begin(s: Session) -> Pending[None]:
            tx.generation = self.generation
            return s.tx_begin(tx, self.clock())
        return tx, self.run(begin)

    def tx_end(self, tx: TxRecord, commit: bool) -> Pending[None]:
        return self._in_tx(tx, lambda s: s.tx_end(tx, commit, self.clock()))

    def _in_tx(self, tx: TxRecord, op: Op) -> Pending[Any]:
        if not self.ready or tx.generation != self.generation:  # the connection it began on is gone
            return _failed(ConnectionLost(f"transaction {tx.name} was lost with its connection"))
        return self.run(op)

    def close(self) -> Pending[None]:
        if self.final_error is not None:
            return Pending.resolved(None)
        if not self.ready:
            self.finish(ConnectionClosedByUser("the connection was closed"))
            return Pending.resolved(None)
        assert self.session is not None
        self.closing = True
        done: Pending[None] = Pending()
        self.session.close(self.clock()).add_done_callback(lambda p: done.resolve(None))  # or the socket died
        return done


def _failed(error: BaseException) -> Pending[Any]:
    p: Pending[Any] = Pending()
    p.fail(error)
    return p
