"""The API of both async front ends (asyncio and trio): they differ only in how a task waits for a
``Pending``, how the I/O task is woken to write, and the queue a subscription reads from."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from . import _api
from ._async_bulk import AsyncBulk
from ._core import Core
from ._errors import ClientError
from ._model import ConsumerRecord, Delivery
from ._pending import Pending
from ._session import TxRecord

__all__ = ["AsyncConnection", "AsyncSubscription", "AsyncTransaction"]

_END = object()


class AsyncConnection(AsyncBulk, ABC):
    """A client connection (AMQP or STOMP) for async code. Every call runs on the connection's I/O task;
    heart-beats are answered there, so a consumer that awaits for minutes does not lose the connection."""

    def __init__(self, core: Core) -> None:
        self._core = core

    # -- what asyncio and trio provide ---------------------------------------------------------
    @abstractmethod
    async def _wait(self, pending: Pending[Any]) -> Any: ...
    @abstractmethod
    def _kick(self) -> None:
        """Make the I/O task write what the core has to send."""
    def _kick_soon(self) -> None:
        """``_kick`` for calls that come in bunches (a batch callback's acks): a front end may merge them."""
        self._kick()

    @abstractmethod
    def _inbox(self) -> Any:
        """A queue with ``put_nowait(item)``, ``qsize()`` and ``async get()``."""
    @abstractmethod
    async def _stop(self) -> None:
        """Stop the I/O task once the core is finished."""

    async def _until_connected(self) -> None:
        """``connect``'s wait: the first ready session, or the error that ended the attempts."""
        try:
            await self._wait(self._core.connected)
        except BaseException:
            await self._stop()
            raise

    @abstractmethod
    async def _flow(self) -> None:
        """Yield to the I/O task, and wait while too much output is queued (back-pressure): a loop of
        unconfirmed publishes must not starve heart-beats or fill memory."""

    async def _do(self, pending: Pending[Any]) -> Any:
        self._kick()
        if pending.done:  # nothing to wait for (an unconfirmed publish): still let the I/O task run
            await self._flow()
        return await self._wait(pending)

    # -- the API --------------------------------------------------------------------------------
    async def publish(self, target: str, body: bytes, *, headers: dict[str, Any] | None = None,
                      confirm: bool = True, exchange: str | None = None, properties: Any = None) -> None:
        """Publish ``body`` to ``target`` (STOMP destination, or AMQP routing key on ``exchange``, default
        ""). With ``confirm`` (the default) this returns once the broker took responsibility (AMQP confirm,
        STOMP receipt) and raises if it refused or the connection was lost first."""
        await self._do(self._core.publish(target, body, headers or {}, _api.publish_options(exchange, properties),
                                          confirm))

    async def declare_queue(self, name: str = "", *, durable: bool = False, exclusive: bool = False,
                            auto_delete: bool = False, passive: bool = False,
                            arguments: dict[str, Any] | None = None) -> str:
        """queue.declare (AMQP); restored after a reconnect. Returns the queue's name."""
        ok = await self._do(self._core.declare(
            "queue", _api.queue_args(name, durable, exclusive, auto_delete, passive, arguments)))
        return str(ok.queue)

    async def declare_exchange(self, name: str, type: str = "direct", *, durable: bool = False,
                               auto_delete: bool = False, passive: bool = False,
                               arguments: dict[str, Any] | None = None) -> None:
        """exchange.declare (AMQP); restored after a reconnect."""
        await self._do(self._core.declare(
            "exchange", _api.exchange_args(name, type, durable, auto_delete, passive, arguments)))

    async def bind_queue(self, queue: str, exchange: str, routing_key: str = "",
                         arguments: dict[str, Any] | None = None) -> None:
        """queue.bind (AMQP); restored after a reconnect."""
        await self._do(self._core.declare("bind", _api.bind_args(queue, exchange, routing_key, arguments)))

    async def unbind_queue(self, queue: str, exchange: str, routing_key: str = "",
                           arguments: dict[str, Any] | None = None) -> None:
        """queue.unbind (AMQP); the binding is no longer restored after a reconnect."""
        await self._do(self._core.declare("unbind", _api.bind_args(queue, exchange, routing_key, arguments)))

    async def delete_queue(self, name: str) -> None:
        await self._do(self._core.declare("delete_queue", {"queue": name}))

    async def subscribe(self, source: str, *, prefetch: int = 0, auto_ack: bool = False,
                        offset: int | str | None = None, arguments: dict[str, Any] | None = None
                        ) -> AsyncSubscription:
        """Consume from ``source`` (AMQP queue, STOMP destination); iterate the result with ``async for``.
        ``offset`` is a stream's x-stream-offset; after a reconnect the subscription resumes after the
        last delivery acked (auto_ack: received). Raises if the broker refuses it."""
        inbox = self._inbox()
        consumer, pending = self._core.subscribe(
            source, prefetch, auto_ack, offset, arguments or {}, inbox.put_nowait,
            lambda error: inbox.put_nowait((_END, error)))
        await self._do(pending)
        return AsyncSubscription(self, consumer, inbox)

    async def ack(self, delivery: Delivery) -> None:
        self._settle(delivery, "ack", False)

    async def nack(self, delivery: Delivery, requeue: bool = True) -> None:
        self._settle(delivery, "nack", requeue)

    async def reject(self, delivery: Delivery, requeue: bool = False) -> None:
        self._settle(delivery, "reject", requeue)

    def _settle(self, delivery: Delivery, how: str, requeue: bool, tx: TxRecord | None = None) -> None:
        """Settling has no answer to wait for: AMQP's ack and STOMP's ACK are one-way."""
        self._core.check_settle(delivery, tx)
        self._core.settle(delivery, how, requeue, tx)
        self._kick()

    def transaction(self) -> AsyncTransaction:
        """A transaction (AMQP tx on a channel of its own; STOMP BEGIN): ``async with conn.transaction()
        as tx`` begins it, commits at the end of the block and rolls back if the block raises."""
        return AsyncTransaction(self)

    async def close(self) -> None:
        """Close cleanly (AMQP connection.close / STOMP DISCONNECT with a receipt), then stop."""
        await self._do(self._core.close())
        await self._stop()

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncSubscription:
    """Deliveries of one consumer, as an async iterator; ends when cancelled or the connection closed,
    raises the broker's error if the broker ended it (e.g. ``ChannelClosed``, ``ConsumerCancelled``)."""

    def __init__(self, conn: AsyncConnection, consumer: ConsumerRecord, inbox: Any) -> None:
        self._conn, self.consumer, self._inbox = conn, consumer, inbox

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        while (delivery := self._conn._core.take(await self._inbox.get(), self._inbox.put_nowait,
                                                 StopAsyncIteration)) is None:
            pass
        return delivery

    def pending(self) -> int:
        """Deliveries received and not yet taken by the iteration (at most the prefetch)."""
        return int(self._inbox.qsize())

    async def cancel(self) -> None:
        await self._conn._do(self._conn._core.cancel(self.consumer))


class AsyncTransaction:
    """Publishes (and, over STOMP, acks) that take effect together at ``commit()``."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn
        self._tx: TxRecord | None = None

    async def begin(self) -> None:
        self._tx, pending = self._conn._core.tx_begin()
        await self._conn._do(pending)

    @property
    def tx(self) -> TxRecord:
        if self._tx is None:
            raise RuntimeError("the transaction has not begun (use `async with conn.transaction() as tx`)")
        return self._tx

    async def publish(self, target: str, body: bytes, *, headers: dict[str, Any] | None = None,
                      exchange: str | None = None, properties: Any = None) -> None:
        await self._conn._do(self._conn._core.publish(
            target, body, headers or {}, _api.publish_options(exchange, properties), False, self.tx))

    async def ack(self, delivery: Delivery) -> None:
        """STOMP: ACK inside the transaction. (AMQP acks belong to the consumer's channel, not this one.)"""
        self._conn._settle(delivery, "ack", False, self.tx)

    async def commit(self) -> None:
        await self._conn._do(self._conn._core.tx_end(self.tx, True))

    async def rollback(self) -> None:
        await self._conn._do(self._conn._core.tx_end(self.tx, False))

    async def __aenter__(self) -> AsyncTransaction:
        await self.begin()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc is None:
            await self.commit()
            return
        try:
            await self.rollback()
        except ClientError as failed:  # the block's own exception stays the one raised
            exc.add_note(f"and the rollback failed: {failed}")
