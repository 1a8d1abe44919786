"""asyncio adapter: Protocol/Transport callbacks drive the broker; ``loop.call_at`` is the timer.

data_sent accounting: ``transport.write`` hands bytes to the transport, which sends what the
kernel takes at once and buffers the rest. After every flush and in ``resume_writing`` we read
``transport.get_write_buffer_size()``; whatever of the bytes handed over is no longer buffered
has left the process and is reported. While the peer is slow the buffer crosses the high-water
mark, so ``resume_writing`` is guaranteed to fire; the low-water mark is 0, so it fires only when
the buffer is empty and every byte gets reported (the engine does its own back-pressure, so the
transport's pause/resume gate nothing).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ._driver import Driver, Listener, ReadyCallback
from ._sockets import ACCEPT_RETRY_DELAY, accept_ready, bind_listeners
from ._syncer import SyncWorker

__all__ = ["AsyncioServer"]


class _Conn(asyncio.Protocol):
    __slots__ = ("server", "protocol", "conn_id", "transport", "unreported")

    def __init__(self, server: AsyncioServer, protocol: str) -> None:
        self.server = server
        self.protocol = protocol
        self.conn_id = server.new_conn_id()
        self.transport: asyncio.Transport | None = None
        self.unreported = 0  # bytes handed to the transport, not yet reported as sent

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=64 * 1024, low=0)
        srv = self.server
        srv.conns[self.conn_id] = self
        peer = transport.get_extra_info("peername") or ()
        srv.call(srv.broker.connection_made, self.conn_id, self.protocol, peer, time.time())

    def data_received(self, data: bytes) -> None:
        srv = self.server
        srv.call(srv.broker.data_received, self.conn_id, data, time.time())

    def eof_received(self) -> bool:
        srv = self.server
        srv.call(srv.broker.data_received, self.conn_id, b"", time.time())
        return True  # keep the write side open: the broker decides when to Close

    def connection_lost(self, exc: Exception | None) -> None:
        srv = self.server
        if srv.conns.pop(self.conn_id, None) is not None:
            srv.gone(self.conn_id)
            srv.pump()

    def resume_writing(self) -> None:
        self.account()
        self.server.pump()

    def account(self) -> None:
        assert self.transport is not None
        buffered = self.transport.get_write_buffer_size()
        if self.unreported > buffered:
            self.server.sent(self.conn_id, self.unreported - buffered)
            self.unreported = buffered


class AsyncioServer(Driver):
    kind = "asyncio"

    def __init__(self, broker: Any, listeners: list[Listener]) -> None:
        super().__init__(broker, listeners)
        self.conns: dict[int, _Conn] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stop_flag = threading.Event()
        self._stop_event: asyncio.Event | None = None
        self._syncer = SyncWorker(broker.run_sync, self._sync_finished)
        self._accepting: set[asyncio.Task[Any]] = set()  # transports being set up

    # -- primitives ----------------------------------------------------------------------------
    def _send(self, conn_id: int, data: bytes) -> None:
        conn = self.conns.get(conn_id)
        if conn is None or conn.transport is None or conn.transport.is_closing():
            return
        conn.transport.write(data)
        conn.unreported += len(data)
        conn.account()

    def _close(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is None or conn.transport is None or conn.transport.is_closing():
            return
        transport = conn.transport
        transport.close()  # flushes the buffer first; connection_lost follows
        assert self.loop is not None
        self.loop.call_later(self.close_timeout, transport.abort)

    def _pause(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            conn.transport.pause_reading()

    def _resume(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            conn.transport.resume_reading()

    def _start_sync(self, token: int) -> None:
        self._syncer.request(token)

    def _sync_finished(self, token: int, exc: BaseException | None) -> None:
        """On the sync thread: hop back to the loop (gone if the loop already ended)."""
        loop = self.loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._sync_done, token, exc)
            except RuntimeError:
                pass  # loop closed: shutting down, nothing waits for the answer

    def _arm_timer(self, deadline: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None and self.loop is not None:
            when = self.loop.time() + (deadline - time.time())
            self._timer = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._deadline = None  # so pump() re-arms even if the broker keeps the same deadline
        self.call(self.broker.handle_timer, time.time())

    # -- lifecycle -----------------------------------------------------------------------------
    def serve_forever(self, ready: ReadyCallback | None = None) -> None:
        try:
            asyncio.run(self._main(ready))
        finally:
            self._syncer.close()

    def _post_soon(self, fn: Callable[[], None]) -> None:
        if self.loop is None:
            raise RuntimeError("the asyncio server is not running")
        self.loop.call_soon_threadsafe(fn)  # RuntimeError once the loop is closed

    def stop(self) -> None:
        self._stop_flag.set()
        loop, event = self.loop, self._stop_event
        if loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop already closed
                pass

    def _accept(self, lsock: socket.socket, protocol: str) -> None:
        # Our own accept rather than loop.create_server: on EMFILE the stdlib (3.11) logs a
        # traceback and schedules a retry once per backlog slot, i.e. thousands per tick.
        loop = self.loop
        assert loop is not None
        accepted, exhausted = accept_ready(lsock)
        if exhausted:
            loop.remove_reader(lsock)
            loop.call_later(ACCEPT_RETRY_DELAY, loop.add_reader, lsock, self._accept, lsock, protocol)
        for sock, _ in accepted:
            task = loop.create_task(loop.connect_accepted_socket(lambda: _Conn(self, protocol), sock))
            self._accepting.add(task)
            task.add_done_callback(self._accepting.discard)

    def _close_listeners(self, bound: list[tuple[socket.socket, Listener]]) -> None:
        assert self.loop is not None
        while bound:
            lsock, _ = bound.pop()
            self.loop.remove_reader(lsock)
            lsock.close()

    async def _main(self, ready: ReadyCallback | None) -> None:
        loop = self.loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        bound: list[tuple[socket.socket, Listener]] = []
        try:
            bound = bind_listeners(self.listeners, self.recv_buffer)
            for lsock, lst in bound:
                loop.add_reader(lsock, self._accept, lsock, lst.protocol)
            self.pump()  # arm the broker's timer, if it already has one
            self._announce([lst for _, lst in bound], ready)
            if not self._stop_flag.is_set():
                await self._stop_event.wait()
            self._close_listeners(bound)
            if self._close_clients():
                deadline = loop.time() + self.shutdown_timeout
                while self.conns and loop.time() < deadline:
                    await asyncio.sleep(0.01)
        finally:
            self._close_listeners(bound)
            if self._timer is not None:
                self._timer.cancel()
            conns = list(self.conns.values())
            self.conns.clear()
            for conn in conns:
                if conn.transport is not None:
                    conn.transport.abort()
            self._stop_all([c.conn_id for c in conns])
            await asyncio.sleep(0)  # let the aborted transports run their callbacks
