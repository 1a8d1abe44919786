"""What the AMQP and STOMP sessions share: one socket's life, its output buffer and how it ends.

A session is sans-IO: the front end feeds it bytes and timer ticks and writes ``data_to_send()``.
It lives from the socket's first byte to its loss; the ``Core`` above it outlives reconnects."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ._bulk import Batch, BatchSink, OnConfirm
from ._errors import ConnectionLost
from ._model import ConsumerRecord, Delivery
from ._pending import Pending
from ._url import Params


class Core(Protocol):
    """What a session uses of the ``_core.Core`` that outlives it (a narrow interface, so the
    sessions do not import the core that creates them)."""

    params: Params
    generation: int
    clock: Callable[[], float]
    #: the declared topology to restore after a reconnect: key -> (kind, arguments)
    topology: dict[tuple[Any, ...], tuple[str, dict[str, Any]]]
    #: the consumers to subscribe again, by tag
    consumers: dict[str, ConsumerRecord]

    def forget_consumer(self, consumer: ConsumerRecord) -> None: ...


__all__ = ["Session", "TxRecord", "SETTLE"]

log = logging.getLogger("sansmq_client")

#: how a delivery is settled: ack, nack (requeue as asked) or reject
SETTLE = ("ack", "nack", "reject")


@dataclass(slots=True, eq=False)
class TxRecord:
    """A transaction; bound to the session (and AMQP channel) it began on, so a reconnect breaks it."""

    generation: int
    name: str
    channel: int = 0
    error: BaseException | None = None  # the broker closed its channel: every later call raises this


class Session(ABC):
    #: the codec's NEED_DATA sentinel and RemoteProtocolError class
    NEED_DATA: ClassVar[object]
    REMOTE_ERROR: ClassVar[type[Exception]]
    DELIVERY: ClassVar[type]  # the codec's event for a delivered message, handled by ``_deliver``
    conn: Any  # the codec's client-role Connection

    def __init__(self, core: Core) -> None:
        self.core = core
        self.params = core.params
        self.generation = core.generation
        self.out = bytearray()
        self.ready: Pending[None] = Pending()  # logged in and restored: user operations may run
        self.error: BaseException | None = None  # set once the session is over
        self.fatal = False  # over for good: do not reconnect (refused log-in, closed by the user, ...)
        self.batches: dict[Any, tuple[ConsumerRecord, Batch]] = {}  # this read's, by consumer channel/id

    def data_to_send(self) -> bytes | bytearray:
        """The output so far, handed over whole (no copy): the session starts a new buffer."""
        data = self.out
        if not data:
            return b""
        self.out = bytearray()
        return data

    # -- bytes in, events handled (the codecs share these calls) ---------------------------------
    def receive_data(self, data: bytes, now: float) -> None:
        self.conn.receive_data(data, now=now)  # b"" (EOF) comes back as ConnectionClosed
        self._drain(now)
        if self.batches:
            self._hand_over_batches()

    def get_timer(self) -> float | None:
        timer: float | None = self.conn.get_timer()
        return timer

    def handle_timer(self, now: float) -> None:
        self.conn.handle_timer(now)  # queues HeartbeatDue and/or PeerTimedOut
        self._drain(now)

    def _drain(self, now: float) -> None:
        next_event, need_data, delivery, deliver = self.conn.next_event, self.NEED_DATA, self.DELIVERY, self._deliver
        while self.error is None:
            try:
                event = next_event()
            except self.REMOTE_ERROR as exc:
                self.protocol_error(exc, now)
                return
            if type(event) is delivery:  # the most frequent event by far: straight to its handler
                deliver(event)
            elif event is need_data:
                return
            else:
                self._handle(event, now)

    # -- batch subscriptions (``_bulk``): one callback per consumer and read -------------------------
    def add_to_batch(self, route: Any, consumer: ConsumerRecord, event: Any, body: bytes, ack_id: Any) -> None:
        entry = self.batches.get(route)
        if entry is None:
            entry = self.batches[route] = (consumer, Batch(session=self, route=route, sink=consumer.batch))
        batch = entry[1]
        batch.bodies.append(body)
        batch.ack_ids.append(ack_id)
        if consumer.batch.events:  # kept only when asked: objects held past the read cost the GC's time
            batch.events.append(event)
        if consumer.offset is not None:
            batch.last_offset = self.stream_offset(event)

    def _hand_over_batches(self) -> None:
        batches, self.batches = self.batches, {}
        for consumer, batch in batches.values():
            if consumer.ended:
                continue
            try:
                consumer.batch.on_batch(batch)
            except Exception:  # the user's callback: reported as asyncio reports a callback's error, not fatal
                log.exception("sansmq_client: the batch callback of consumer %s raised", consumer.tag)
            if batch.last_offset is not None:
                consumer.last_offset = batch.last_offset  # handed over = processed: a reconnect resumes after it

    def cumulative_settle(self, sink: BatchSink) -> bool:
        """Whether one settle with ``multiple`` covers the earlier deliveries (AMQP: always)."""
        return True

    def protocol_error(self, exc: Exception, now: float) -> None:
        """The broker sent bytes the codec refuses: the connection cannot go on."""
        self.end(ConnectionLost(f"protocol error from the broker: {exc}"))

    def end(self, error: BaseException, *, fatal: bool = False) -> None:
        """The session is over: everything in flight fails with ``error`` (never lost silently)."""
        if self.error is None:
            self.error, self.fatal = error, fatal
            self.fail_in_flight(error)
            self.ready.fail(error)

    def restore_consumers(self, now: float) -> None:
        """Subscribe the Core's consumers again; one the broker now refuses ends with that error (and is
        not tried again on the next connection)."""
        for consumer in list(self.core.consumers.values()):
            self.subscribe(consumer, now).add_done_callback(self._restore_failed(consumer))

    def _restore_failed(self, consumer: ConsumerRecord) -> Callable[[Pending[None]], None]:
        def check(p: Pending[None]) -> None:
            if p.error is not None and self.error is None:  # refused by the broker, not lost with the socket
                self.core.forget_consumer(consumer)
                consumer.end(p.error)
        return check

    # -- what each protocol implements --------------------------------------------------
    @abstractmethod
    def _handle(self, event: Any, now: float) -> None: ...
    @abstractmethod
    def _deliver(self, event: Any) -> None: ...
    @abstractmethod
    def fail_in_flight(self, error: BaseException) -> None: ...
    @abstractmethod
    def publish(self, target: str, body: bytes, headers: dict[str, Any], options: dict[str, Any],
                confirm: bool, tx: TxRecord | None, now: float) -> Pending[None]: ...
    @abstractmethod
    def subscribe(self, consumer: ConsumerRecord, now: float) -> Pending[None]: ...
    @abstractmethod
    def publish_burst(self, target: str, bodies: Sequence[bytes], headers: dict[str, Any], options: dict[str, Any],
                      first_number: int, on_confirm: OnConfirm | None, confirm_every: int, now: float) -> Pending[None]:
        """Publish ``bodies`` with no ``Pending`` per message; confirmations go to ``on_confirm`` under the
        client's numbers, ``first_number`` onwards."""
    @abstractmethod
    def settle_raw(self, route: Any, sink: BatchSink, ack_id: Any, how: str, multiple: bool,
                   requeue: bool) -> None: ...
    @abstractmethod
    def ack_each(self, route: Any, ack_ids: list[Any]) -> None:
        """One ack per delivery, as ``settle_raw`` would send them, in one call."""
    @abstractmethod
    def stream_offset(self, event: Any) -> int | None:
        """The x-stream-offset of a delivery event, None outside streams."""
    @abstractmethod
    def cancel(self, consumer: ConsumerRecord, now: float) -> Pending[None]: ...
    @abstractmethod
    def settle(self, delivery: Delivery, how: str, requeue: bool, tx: TxRecord | None, now: float) -> None: ...
    @abstractmethod
    def declare(self, kind: str, args: dict[str, Any], now: float) -> Pending[Any]: ...
    @abstractmethod
    def tx_begin(self, tx: TxRecord, now: float) -> Pending[None]: ...
    @abstractmethod
    def tx_end(self, tx: TxRecord, commit: bool, now: float) -> Pending[None]: ...
    @abstractmethod
    def close(self, now: float) -> Pending[None]: ...
