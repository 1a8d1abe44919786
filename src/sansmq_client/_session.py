"""What the AMQP and STOMP sessions share: one socket's life, its output buffer and how it ends.

A session is sans-IO: the front end feeds it bytes and timer ticks and writes ``data_to_send()``.
It lives from the socket's first byte to its loss; the ``Core`` above it outlives reconnects."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

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
    conn: Any  # the codec's client-role Connection

    def __init__(self, core: Core) -> None:
        self.core = core
        self.params = core.params
        self.generation = core.generation
        self.out = bytearray()
        self.ready: Pending[None] = Pending()  # logged in and restored: user operations may run
        self.error: BaseException | None = None  # set once the session is over
        self.fatal = False  # over for good: do not reconnect (refused log-in, closed by the user, ...)

    def data_to_send(self) -> bytes:
        data = bytes(self.out)
        self.out.clear()
        return data

    # -- bytes in, events handled (the codecs share these calls) ---------------------------------
    def receive_data(self, data: bytes, now: float) -> None:
        self.conn.receive_data(data, now=now)  # b"" (EOF) comes back as ConnectionClosed
        self._drain(now)

    def get_timer(self) -> float | None:
        timer: float | None = self.conn.get_timer()
        return timer

    def handle_timer(self, now: float) -> None:
        self.conn.handle_timer(now)  # queues HeartbeatDue and/or PeerTimedOut
        self._drain(now)

    def _drain(self, now: float) -> None:
        while self.error is None:
            try:
                event = self.conn.next_event()
            except self.REMOTE_ERROR as exc:
                self.protocol_error(exc, now)
                return
            if event is self.NEED_DATA:
                return
            self._handle(event, now)

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
    def fail_in_flight(self, error: BaseException) -> None: ...
    @abstractmethod
    def publish(self, target: str, body: bytes, headers: dict[str, Any], options: dict[str, Any],
                confirm: bool, tx: TxRecord | None, now: float) -> Pending[None]: ...
    @abstractmethod
    def subscribe(self, consumer: ConsumerRecord, now: float) -> Pending[None]: ...
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
