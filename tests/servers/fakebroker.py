"""A tiny line-based broker honouring the engine's driver contract, to test adapters alone.

Commands (one per line): ``echo TEXT``, ``close``, ``pause``, ``resume ID``, ``sync``,
``timer MS TEXT``, ``big N``, ``stats``, ``id``. EOF is answered with ``eof`` and a Close.
Every call records the calling thread so tests can check single-threaded use.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from engine import Close, PauseReading, ResumeReading, Sync, Write


class FakeStore:
    def __init__(self) -> None:
        self.sync_threads: list[str] = []
        self.fail_tokens: set[int] = set()
        self.sync_seconds = 0.01  # how long the pretend fsync takes

    def sync(self, token: int) -> None:
        self.sync_threads.append(threading.current_thread().name)
        time.sleep(self.sync_seconds)
        failing = {t for t in self.fail_tokens if t <= token}  # a sync covers every earlier token
        if failing:
            self.fail_tokens -= failing
            raise OSError("disk on fire")


@dataclass
class ConnState:
    protocol: str
    peer: tuple
    buf: bytearray = field(default_factory=bytearray)
    written: int = 0
    sent: int = 0
    open: bool = True


class LineBroker:
    def __init__(self) -> None:
        self.store = FakeStore()
        self.conns: dict[int, ConnState] = {}
        self.lost: Counter[int] = Counter()
        self.threads: set[int] = set()
        self.timer_fired_at: list[tuple[float, float]] = []  # (deadline, now)
        self.eofs: list[int] = []
        self._actions: list = []
        self._timers: list[tuple[float, int, int, bytes]] = []
        self._seq = 0
        self._sync_waiters: dict[int, int] = {}
        self.late_calls: list[str] = []  # calls about connections already lost

    # -- helpers --------------------------------------------------------------------------
    def _enter(self) -> None:
        self.threads.add(threading.get_ident())

    def _write(self, conn_id: int, data: bytes) -> None:
        self.conns[conn_id].written += len(data)
        self._actions.append(Write(conn_id, data))

    def _line(self, conn_id: int, line: bytes, now: float) -> None:
        cmd, _, arg = line.partition(b" ")
        if cmd == b"echo":
            self._write(conn_id, arg + b"\n")
        elif cmd == b"close":
            self._write(conn_id, b"bye\n")
            self._actions.append(Close(conn_id))
        elif cmd == b"pause":
            self._write(conn_id, b"paused\n")
            self._actions.append(PauseReading(conn_id))
        elif cmd == b"resume":
            self._actions.append(ResumeReading(int(arg)))
            self._write(conn_id, b"resumed\n")
        elif cmd == b"sync":
            self._seq += 1
            self._sync_waiters[self._seq] = conn_id
            self._actions.append(Sync(self._seq))
        elif cmd == b"failsync":
            self._seq += 1
            self.store.fail_tokens.add(self._seq)
            self._sync_waiters[self._seq] = conn_id
            self._actions.append(Sync(self._seq))
        elif cmd == b"timer":
            ms, _, text = arg.partition(b" ")
            self._seq += 1
            heapq.heappush(self._timers, (now + int(ms) / 1000, self._seq, conn_id, text))
        elif cmd == b"big":
            n = int(arg)
            chunk = b"x" * 65536
            while n > 0:
                self._write(conn_id, chunk[: min(n, len(chunk))])
                n -= len(chunk)
            self._write(conn_id, b"\nend\n")
        elif cmd == b"stats":
            st = self.conns[conn_id]
            self._write(conn_id, b"stats %d\n" % (st.written - st.sent))
        elif cmd == b"id":
            self._write(conn_id, b"id %d\n" % conn_id)

    # -- the driver contract ----------------------------------------------------------------
    def connection_made(self, conn_id: int, protocol: str, peer: tuple, now: float) -> None:
        self._enter()
        assert conn_id not in self.conns
        self.conns[conn_id] = ConnState(protocol, tuple(peer))

    def data_received(self, conn_id: int, data: bytes, now: float) -> None:
        self._enter()
        st = self.conns[conn_id]
        if not st.open:
            self.late_calls.append(f"data_received {conn_id}")
            return
        if not data:
            self.eofs.append(conn_id)
            self._write(conn_id, b"eof\n")
            self._actions.append(Close(conn_id))
            return
        st.buf += data
        start = 0
        while (end := st.buf.find(b"\n", start)) >= 0:
            self._line(conn_id, bytes(st.buf[start:end]), now)
            start = end + 1
        del st.buf[:start]

    def connection_lost(self, conn_id: int, now: float) -> None:
        self._enter()
        self.lost[conn_id] += 1
        self.conns[conn_id].open = False

    def handle_timer(self, now: float) -> None:
        self._enter()
        while self._timers and self._timers[0][0] <= now:
            deadline, _, conn_id, text = heapq.heappop(self._timers)
            self.timer_fired_at.append((deadline, now))
            if self.conns[conn_id].open:
                self._write(conn_id, text + b"\n")

    def get_timer(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def drain(self) -> list:
        self._enter()
        actions, self._actions = self._actions, []
        return actions

    def data_sent(self, conn_id: int, nbytes: int) -> None:
        self._enter()
        st = self.conns[conn_id]
        if not st.open:
            self.late_calls.append(f"data_sent {conn_id}")
        st.sent += nbytes
        assert st.sent <= st.written, (st.sent, st.written)

    def run_sync(self, token: int) -> None:
        self.store.sync(token)  # on the server's sync worker thread (threads: or its loop, see _threads)

    def synced(self, token: int, now: float) -> None:
        """As engine.Broker: a sync covers ``token`` and every earlier one (servers coalesce)."""
        self._answer_syncs(token, b"synced")

    def sync_failed(self, token: int, now: float) -> None:
        """engine.Broker's extension: the store could not sync ``token`` (nor the earlier ones)."""
        self._answer_syncs(token, b"syncfailed")

    def _answer_syncs(self, token: int, word: bytes) -> None:
        self._enter()
        for t in sorted(t for t in self._sync_waiters if t <= token):
            conn_id = self._sync_waiters.pop(t)
            if self.conns[conn_id].open:
                self._write(conn_id, b"%s %d\n" % (word, t))
