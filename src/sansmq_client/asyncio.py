"""The asyncio front end: ``conn = await sansmq_client.asyncio.connect("amqp://guest:guest@host/")``.

One background task owns the connection: it opens the socket and reconnects (back-off, next host) when it
is lost. Meanwhile the socket's reads go straight from its protocol to the core, whose answers are written
at once, and a loop timer answers heart-beats on the codec's timer: none of it waits for user code. User
coroutines only queue work and wait for its outcome."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from . import _api
from ._async import AsyncConnection, AsyncSubscription, AsyncTransaction
from ._async_bulk import BatchSubscription
from ._core import Core
from ._errors import ConnectionLost
from ._pending import Pending
from ._tls import Tls
from ._url import parse_url

__all__ = ["connect", "Connection", "AsyncSubscription", "AsyncTransaction", "BatchSubscription"]

#: bytes queued on the socket above which a publish waits for the socket to drain
HIGH_WATER = 1 << 20


async def connect(url: str) -> Connection:
    """Connect to the first reachable host of ``url`` (``amqp://`` or ``stomp://``, hosts comma-separated).
    Raises if none answers or the broker refuses the log-in."""
    loop = asyncio.get_running_loop()
    conn = Connection(Core(parse_url(url), loop.time))
    conn._task = loop.create_task(conn._run())
    await conn._until_connected()
    return conn


class Connection(AsyncConnection):
    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self._task: asyncio.Task[None] | None = None
        self._sock: _Socket | None = None  # the current connection's socket, while there is one
        self._kick_scheduled = False
        self._in_read = False  # the pump is feeding a read: it writes right after
        self._timer: asyncio.TimerHandle | None = None  # the codec's next timer, while a session runs

    async def _wait(self, pending: Pending[Any]) -> Any:
        if not pending.done:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(p: Pending[Any]) -> None:
                if not future.done():  # the waiter may have been cancelled
                    future.set_result(None)
            pending.add_done_callback(wake)
            await future
        return pending.result()

    def _kick(self) -> None:
        data = self._core.data_to_send()
        transport = self._sock.transport if self._sock is not None else None
        if data and transport is not None and not transport.is_closing():
            transport.write(data)

    def _kick_soon(self) -> None:
        # one write for every ack a batch callback makes; none while the pump feeds a read (it writes next)
        if not self._kick_scheduled and not self._in_read:
            self._kick_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_kick)

    def _scheduled_kick(self) -> None:
        self._kick_scheduled = False
        self._kick()

    async def _flow(self) -> None:
        sock = self._sock
        if sock is not None and sock.transport is not None and sock.transport.get_write_buffer_size() > HIGH_WATER:
            await sock.writable.wait()  # set again when the transport drained (or the socket is gone)
        else:
            await asyncio.sleep(0)

    def _inbox(self) -> asyncio.Queue[Any]:
        return asyncio.Queue()

    async def _stop(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        core, loop = self._core, asyncio.get_running_loop()
        while core.final_error is None:
            host, port = core.next_host()
            try:
                opening = loop.create_connection(lambda: _Socket(self), host, port,
                                                 **_tls_args(core.params.tls, host))
                transport, sock = await asyncio.wait_for(opening, core.params.connect_timeout)
            except (OSError, TimeoutError) as exc:
                core.connect_failed(exc)
            else:
                self._sock = sock
                _api.tune_socket(transport.get_extra_info("socket"), core.params)
                core.attach()
                self._kick()  # the protocol header / CONNECT frame
                try:
                    lost = await sock.ended  # the bytes go to _received meanwhile
                    if lost is not None:
                        core.detach(ConnectionLost(f"connection to {host}:{port} lost: {lost}"))
                finally:
                    transport.close()
                    self._sock = None
                    if self._timer is not None:
                        self._timer.cancel()
                        self._timer = None
                    core.detach()
            if core.final_error is None:
                await asyncio.sleep(core.backoff())

    def _received(self, data: bytes) -> None:
        """A read of the socket (b"": EOF), straight from the transport: fed to the core, whose answers are
        written at once; a session that is over ends the socket."""
        core = self._core
        self._in_read = True
        try:
            core.receive_data(data)  # b"" is EOF: the session ends itself
        finally:
            self._in_read = False
        self._kick()  # (e.g. the close-ok owed to the broker's connection.close, before the socket closes)
        if core.session is not None and core.session.error is None:
            self._arm_timer()
        elif self._sock is not None and self._sock.transport is not None:
            self._sock.transport.close()

    def _arm_timer(self) -> None:
        """Wake at the codec's timer (heart-beats) by a loop timer of its own, so that a read needs none: armed
        only when there is none yet or the codec's is sooner. Activity moves the codec's timer later, so one
        that fires early finds nothing due and arms the next."""
        timer = self._core.get_timer()
        if timer is None or (self._timer is not None and self._timer.when() <= timer):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(timer, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        core = self._core
        if core.session is None or core.session.error is not None:
            return
        timer = core.get_timer()
        if timer is not None and timer <= core.clock():
            core.handle_timer()  # a heart-beat to send, or the broker's silence: the session ends
            self._kick()
        if core.session.error is None:
            self._arm_timer()
        elif self._sock is not None and self._sock.transport is not None:
            self._sock.transport.close()  # the broker's silence ended the session


class _Socket(asyncio.Protocol):
    """One connection's socket: each read goes straight to ``Connection._received`` (no StreamReader, no
    task step per read); ``ended`` is resolved when the socket is gone, with the error that ended it."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.ended: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.writable = asyncio.Event()  # cleared while the transport's buffer is above its high-water mark
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.conn._received(data)

    def eof_received(self) -> bool:
        self.conn._received(b"")
        return False  # and the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()  # a publisher waiting for room finds the connection gone
        if not self.ended.done():
            self.ended.set_result(exc)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


def _tls_args(tls: Tls | None, host: str) -> dict[str, Any]:
    """``create_connection``'s TLS arguments for amqps:// and stomps://."""
    return {} if tls is None else {"ssl": tls.context(), "server_hostname": tls.server_hostname(host)}
