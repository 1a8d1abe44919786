"""The asyncio side shared by the bench clients: one socket, batched writes, back-pressure.

A client is an ``asyncio.Protocol``: bytes arrive in ``data_received`` and go straight into its
sans-IO codec. ``write`` only appends to a list; the list is joined and written once per event
loop iteration, so a producer's burst of messages or a consumer's acks cost one syscall.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from .stats import Stats

__all__ = ["BenchConnection", "BrokerError"]


class BrokerError(Exception):
    """The broker refused or closed the connection (the message says how)."""


class BenchConnection(asyncio.Protocol):
    """Base of the protocol clients: subclasses implement ``feed(data)`` and ``eof()``."""

    def __init__(self, stats: Stats, name: str, send_buffer: int = 0) -> None:
        self.stats = stats
        self.send_buffer = send_buffer
        self.name = name
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = self.loop.create_future()  # result: None, or the BrokerError
        self.closing = False  # we started an orderly close: EOF is expected
        self.failure: BrokerError | None = None
        self.progress = asyncio.Event()  # set on every confirm/receipt (producers wait on it)
        self.sent = 0  # messages this connection published
        self._waiting: tuple[type, asyncio.Future[Any]] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.send_buffer:
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)

    def data_received(self, data: bytes) -> None:
        try:
            self.feed(data)
        except BrokerError as exc:
            self.fail(str(exc))
        except Exception as exc:  # a bug of ours: report it in the summary, do not hang the run
            self.fail(f"internal error: {exc!r}")

    def eof_received(self) -> bool:
        try:
            self.eof()
        except BrokerError as exc:
            self.fail(str(exc))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing and self.failure is None:
            self.fail(f"connection lost: {exc}" if exc else "the broker closed the connection")
        elif self._waiting is not None:
            # closing: e.g. RabbitMQ's Web-STOMP ends the socket instead of receipting DISCONNECT
            fut = self._waiting[1]
            self._waiting = None
            if not fut.done():
                fut.set_result(None)
        self._writable.set()  # wake a paused producer; it sees the failure
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- for subclasses and the runner -----------------------------------------------------
    def feed(self, data: bytes) -> None:
        raise NotImplementedError

    def eof(self) -> None:
        raise NotImplementedError

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def write(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        self._out = []
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))

    def fail(self, text: str) -> None:
        """Record a broker-side failure once and drop the socket."""
        if self.failure is None:
            self.failure = BrokerError(text)
            self.stats.error(f"{self.name}: {text}")
            self.on_failure()
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def on_failure(self) -> None:
        """Wake whatever waits on the broker."""
        self.progress.set()
        if self._waiting is not None:
            fut = self._waiting[1]
            self._waiting = None
            if not fut.done():
                fut.set_exception(self.failure or BrokerError("closed"))

    # -- one request/response at a time, for the set-up phase --------------------------------
    async def expect(self, cls: type, timeout: float = 15.0) -> Any:
        """Wait for the next received event of type ``cls`` (see ``deliver_expected``)."""
        if self.failure is not None:
            raise self.failure
        fut: asyncio.Future[Any] = self.loop.create_future()
        self._waiting = (cls, fut)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.fail(f"no {cls.__name__} from the broker within {timeout:g}s")
            raise self.failure or BrokerError("timeout") from None
        finally:
            if self._waiting is not None and self._waiting[1] is fut:
                self._waiting = None

    def deliver_expected(self, event: Any) -> bool:
        """Hand ``event`` to the ``expect`` waiting for its type; False if nobody waits for it."""
        waiting = self._waiting
        if waiting is None or type(event) is not waiting[0]:
            return False
        self._waiting = None
        if not waiting[1].done():
            waiting[1].set_result(event)
        return True

    @property
    def unconfirmed(self) -> int:
        """Published messages not yet confirmed/receipted (0 when not confirming)."""
        return 0

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    async def finish(self, timeout: float) -> None:
        """Wait (bounded) until the socket is gone after an orderly close was started."""
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except TimeoutError:
            self.abort()
