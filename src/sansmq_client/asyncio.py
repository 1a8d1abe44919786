"""The asyncio front end: ``conn = await sansmq_client.asyncio.connect("amqp://guest:guest@host/")``.

One background task owns the socket: it reads, answers heart-beats on the codec's timer, writes, and
reconnects (back-off, next host) when the connection is lost. User coroutines only queue work for it."""

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
from ._url import parse_url

__all__ = ["connect", "Connection", "AsyncSubscription", "AsyncTransaction", "BatchSubscription"]

#: bytes queued on the socket above which a publish waits for the socket to drain
HIGH_WATER = 1 << 20
#: the most one read takes: what the transport reads at once, so the reader's buffer is taken whole
READ_SIZE = 1 << 18


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
        self._writer: asyncio.StreamWriter | None = None
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
        if data and self._writer is not None and not self._writer.is_closing():
            self._writer.write(data)

    def _kick_soon(self) -> None:
        # one write for every ack a batch callback makes; none while the pump feeds a read (it writes next)
        if not self._kick_scheduled and not self._in_read:
            self._kick_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_kick)

    def _scheduled_kick(self) -> None:
        self._kick_scheduled = False
        self._kick()

    async def _flow(self) -> None:
        writer = self._writer
        if writer is not None and writer.transport.get_write_buffer_size() > HIGH_WATER:
            await writer.drain()
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
        core = self._core
        while core.final_error is None:
            host, port = core.next_host()
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                        core.params.connect_timeout)
            except (OSError, TimeoutError) as exc:
                core.connect_failed(exc)
            else:
                self._writer = writer
                _api.tune_socket(writer.get_extra_info("socket"), core.params)
                core.attach()
                try:
                    await self._pump(reader)
                except OSError as exc:
                    core.detach(ConnectionLost(f"connection to {host}:{port} lost: {exc}"))
                finally:
                    self._kick()  # e.g. the close-ok owed to the broker's connection.close
                    writer.close()
                    self._writer = None
                    core.detach()
            if core.final_error is None:
                await asyncio.sleep(core.backoff())

    async def _pump(self, reader: asyncio.StreamReader) -> None:
        core = self._core
        try:
            while core.session is not None and core.session.error is None:
                self._kick()
                self._arm_timer()
                data = await reader.read(READ_SIZE)
                self._in_read = True
                try:
                    core.receive_data(data)  # b"" is EOF: the session ends itself
                finally:
                    self._in_read = False
            self._kick()
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

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
        elif self._writer is not None:
            self._writer.close()  # the pump's read returns, and it sees the session is over
