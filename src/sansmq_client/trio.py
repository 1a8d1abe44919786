"""The trio front end: ``conn = await sansmq_client.trio.connect("amqp://guest:guest@host/")``.

The connection's I/O runs in a trio system task (so ``connect`` needs no nursery from the caller):
it reads, answers heart-beats on the codec's timer, writes, and reconnects when the connection is lost."""

from __future__ import annotations

import math
from typing import Any

import trio

from . import _api
from ._async import AsyncConnection, AsyncSubscription, AsyncTransaction
from ._core import Core
from ._errors import ConnectionLost
from ._pending import Pending
from ._url import parse_url

__all__ = ["connect", "Connection", "AsyncSubscription", "AsyncTransaction"]

#: bytes queued for the writer task above which a publish waits for it
HIGH_WATER = 1 << 20


async def connect(url: str) -> Connection:
    """Connect to the first reachable host of ``url`` (``amqp://`` or ``stomp://``, hosts comma-separated).
    Raises if none answers or the broker refuses the log-in."""
    conn = Connection(Core(parse_url(url), trio.current_time))
    trio.lowlevel.spawn_system_task(conn._run, name="sansmq_client I/O")
    await conn._until_connected()
    return conn


class _Inbox:
    """An unbounded trio channel with the put_nowait/get shape the subscriptions use (prefetch bounds it)."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Any](math.inf)

    def put_nowait(self, item: Any) -> None:
        self._send.send_nowait(item)

    def qsize(self) -> int:
        return int(self._receive.statistics().current_buffer_used)

    async def get(self) -> Any:
        return await self._receive.receive()


class Connection(AsyncConnection):
    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self._wake = trio.Event()
        self._scope = trio.CancelScope()
        self._finished = trio.Event()
        self._drained = trio.Event()  # set (and replaced) each time the writer task sent a batch

    async def _wait(self, pending: Pending[Any]) -> Any:
        if not pending.done:
            event = trio.Event()
            pending.add_done_callback(lambda p: event.set())
            await event.wait()
        return pending.result()

    def _kick(self) -> None:
        self._wake.set()

    async def _flow(self) -> None:
        session = self._core.session
        while session is not None and session.error is None and len(session.out) > HIGH_WATER:
            drained = self._drained
            self._kick()
            await drained.wait()  # the writer task sent a batch
        await trio.lowlevel.checkpoint()

    def _inbox(self) -> _Inbox:
        return _Inbox()

    async def _stop(self) -> None:
        self._scope.cancel()
        await self._finished.wait()

    async def _run(self) -> None:
        core = self._core
        try:
            with self._scope:
                while core.final_error is None:
                    await self._connect_once()
                    if core.final_error is None:
                        await trio.sleep(core.backoff())
        except Exception as exc:  # a system task must not raise: a bug here ends the connection loudly
            core.finish(ConnectionLost(f"the client's I/O task failed: {exc!r}"))
        finally:
            self._finished.set()

    async def _connect_once(self) -> None:
        core = self._core
        host, port = core.next_host()
        try:
            with trio.fail_after(core.params.connect_timeout):
                stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
                if (tls := core.params.tls) is not None:
                    stream = trio.SSLStream(stream, tls.context(), server_hostname=tls.server_hostname(host))
                    await stream.do_handshake()
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:  # the last: a failed TLS handshake
            core.connect_failed(exc)
            return
        _api.tune_socket(stream, core.params)
        core.attach()
        self._kick()  # the protocol header / CONNECT frame
        try:
            async with stream, trio.open_nursery() as nursery:
                nursery.start_soon(self._write, stream)
                await self._read(stream)
                nursery.cancel_scope.cancel()
            with trio.move_on_after(1):  # e.g. the close-ok owed to the broker's connection.close
                await stream.send_all(core.data_to_send())
        except* (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as group:  # the nursery groups them
            core.detach(ConnectionLost(f"connection to {host}:{port} lost: {group.exceptions[0]}"))
        finally:
            core.detach()

    async def _read(self, stream: trio.abc.Stream) -> None:
        core = self._core
        while core.session is not None and core.session.error is None:
            timer = core.get_timer()
            data = None
            with trio.move_on_at(math.inf if timer is None else timer):
                data = await stream.receive_some(65536)
            if data is None:
                core.handle_timer()
            else:
                core.receive_data(bytes(data))  # b"" is EOF: the session ends itself
            self._kick()

    async def _write(self, stream: trio.abc.Stream) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            data = self._core.data_to_send()
            if data:
                await stream.send_all(data)
            self._drained.set()
            self._drained = trio.Event()
