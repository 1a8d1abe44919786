"""The low-overhead calls of the async front ends (asyncio and trio): ``publish_burst`` and
``subscribe_batches``. See ``_bulk`` for what they promise; here is only how an async caller reaches them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from . import _api
from ._bulk import Batch, BatchSink, OnConfirm
from ._core import Core
from ._model import ConsumerRecord
from ._pending import Pending

__all__ = ["AsyncBulk", "BatchSubscription"]

log = logging.getLogger("sansmq_client")


class AsyncBulk:
    """Mixed into ``AsyncConnection``, which provides these three."""

    _core: Core

    async def _do(self, pending: Pending[Any]) -> Any:
        raise NotImplementedError

    def _kick_soon(self) -> None:
        raise NotImplementedError

    async def publish_burst(self, target: str, bodies: Sequence[bytes], *,
                            on_confirm: OnConfirm | None = None, confirm_every: int = 0,
                            headers: dict[str, Any] | None = None, exchange: str | None = None,
                            properties: Any = None) -> int:
        """Publish every body of ``bodies`` to ``target`` (as ``publish``), encoded and written together, and
        return the number of the first (the rest follow it; numbers count every burst of this connection,
        across reconnects). Nothing waits for the broker: confirmations, refusals and losses reach
        ``on_confirm(number, multiple, error)`` (basic.ack's meaning: ``multiple`` covers every publish up to
        ``number`` not confirmed yet). Over STOMP a RECEIPT is asked for on the burst's last SEND, or with
        ``confirm_every`` N on every SEND whose number is a multiple of N. Waits only while too much output is
        queued; raises if the connection is closed or the call is not valid for the protocol."""
        first, pending = self._core.publish_burst(target, bodies, headers or {},
                                                  _api.publish_options(exchange, properties), on_confirm,
                                                  confirm_every)
        await self._do(pending)
        return first

    async def subscribe_batches(self, source: str, on_batch: Callable[[Batch], None], *,
                                prefetch: int = 0, auto_ack: bool = False, cumulative: bool = False,
                                events: bool = False,
                                offset: int | str | None = None, arguments: dict[str, Any] | None = None,
                                on_end: Callable[[BaseException | None], None] | None = None
                                ) -> BatchSubscription:
        """Consume from ``source`` (as ``subscribe``), the deliveries of each socket read handed to
        ``on_batch(batch)`` at once, on the connection's I/O task (so it must not block; what it settles is
        written when it returns). ``cumulative`` (STOMP): subscribe with ack:client, so one ACK settles every
        earlier delivery. ``events``: keep each message's codec event (headers, properties, redelivered) in
        ``Batch.events``; off by default, as objects kept past the read cost garbage-collector time.
        ``on_end(error)`` runs once when the subscription ends: None when cancelled or the
        connection was closed, else the broker's or the connection's error. A stream subscription resumes,
        after a reconnect, after the last delivery handed to ``on_batch``."""
        sink = BatchSink(on_batch, self._kick_soon, cumulative, events)
        consumer, pending = self._core.subscribe(source, prefetch, auto_ack, offset, arguments or {}, _unused,
                                                 on_end or _ignore, batch=sink)
        await self._do(pending)
        return BatchSubscription(self, consumer)


class BatchSubscription:
    """A running ``subscribe_batches``; ``cancel()`` ends it (the broker requeues what was not acked)."""

    def __init__(self, conn: AsyncBulk, consumer: ConsumerRecord) -> None:
        self._conn, self.consumer = conn, consumer

    async def cancel(self) -> None:
        await self._conn._do(self._conn._core.cancel(self.consumer))


def _unused(delivery: Any) -> None:
    raise AssertionError("a batch subscription's deliveries go to its BatchSink")


def _ignore(error: BaseException | None) -> None:
    if error is not None:  # nobody asked to hear of it: not silent all the same
        log.warning("sansmq_client: a batch subscription ended: %s", error)
