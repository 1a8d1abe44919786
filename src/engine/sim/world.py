"""``SimWorld``: one simulated machine — a SimFS disk, a SegmentStore on it, a Broker, an in-memory
network and a clock — that can lose power and boot again from what its disk kept."""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._broker import Broker
from ..config import Config
from ..segment_store import SegmentStore
from ..simfs import PowerCut, SimFS
from ..store import Store, StoreError
from ..testing import DEFAULT_START, SimClient, SimNetwork

__all__ = ["SimWorld", "StoreFactory", "quiet_store_log"]

#: builds the store on the simulated disk (tests pass a deliberately broken one)
StoreFactory = Callable[[SimFS], Store]
DATA_DIR = "/data"


def segment_store(fs: SimFS) -> Store:
    # small segments and windows: rotation, deletion and paging happen in a short run
    return SegmentStore(DATA_DIR, fs=fs, segment_size=16 << 10, recover_window=64)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


_STORE_LOG = logging.getLogger("sansmq.store")
_LOG = logging.getLogger("sansmq")
_capture = _Capture()
_null = logging.NullHandler()


@contextmanager
def quiet_store_log() -> Iterator[None]:
    """While simulating, the store's warnings are collected (``SimWorld.reports``), not printed."""
    old = _LOG.propagate
    _LOG.propagate = False  # nor is anything else the broker logs (refused logins after a media fault)
    _LOG.addHandler(_null)  # (without a handler, Python's last resort would print them)
    _STORE_LOG.addHandler(_capture)
    try:
        yield
    finally:
        _STORE_LOG.removeHandler(_capture)
        _LOG.removeHandler(_null)
        _LOG.propagate = old


class SimWorld:
    """A broker on a simulated disk. ``sync()`` runs the fsyncs the broker asked for (``fail=True``:
    the first fails), ``crash(mode)`` cuts the power (SimFS.power_loss) and boots a new broker from
    the disk, ``restart()`` stops cleanly and boots again. Time only moves with ``advance``."""

    def __init__(self, seed: int, *, config: Config | None = None, store: StoreFactory = segment_store,
                 start: float = DEFAULT_START) -> None:
        self.seed = seed
        self.fs = SimFS()
        self.config = config or Config()
        self._store_factory = store
        self.now = start
        self.boots = 0
        #: what the store reported (warnings, errors, a refusal to open), any time
        self.reports: list[str] = []
        del _capture.records[:]
        self._digest = hashlib.blake2b(digest_size=16)
        self._logged = 0
        self.net: SimNetwork = self._boot()

    def _boot(self) -> SimNetwork:
        self.boots += 1
        before = len(_capture.records)
        try:
            try:
                store = self._store_factory(self.fs)
            except StoreError:
                if not self.fs.disk_full:
                    raise
                self.fs.disk_full = False  # the operator frees space and starts it again
                self.reports.append("the store refused a full disk")
                store = self._store_factory(self.fs)
        finally:
            self.reports.extend(_capture.records[before:])
            del _capture.records[before:]
        broker = Broker(self.config, store, random.Random(f"{self.seed}/broker/{self.boots}"))
        net = SimNetwork(broker, self.seed * 1000 + self.boots, start=self.now, auto_sync=False,
                         max_chunk=None)
        self._logged = 0
        return net

    @property
    def broker(self) -> Broker:
        return self.net.broker

    def connect(self, protocol: str = "stomp") -> SimClient:
        return self.net.connect(protocol=protocol)

    def run(self) -> None:
        self.net.run_until_idle()
        self._fold_log()

    def take_reports(self) -> None:
        """Collect what the store logged since the last call (streams open lazily, after boot)."""
        self.reports.extend(_capture.records)
        del _capture.records[:]

    def advance(self, seconds: float) -> None:
        self.net.advance(seconds)
        self.now = self.net.now
        self._fold_log()

    def sync(self, fail: bool = False) -> None:
        """Complete the pending syncs (``fail``: the disk fails the first fsync)."""
        if fail and self.net.pending_syncs:
            self.fs.fail_fsyncs(1)
        self.net.complete_syncs()
        self.fs.disarm()
        self._fold_log()

    def sync_and_cut(self, n: int, mode: str) -> None:
        """Start the pending syncs and cut the power just before their ``n``-th fsync (or after
        them all if they have fewer), then boot again (see ``crash``)."""
        self.sync_until_cut(n)
        self.crash(mode)

    def sync_until_cut(self, n: int) -> bool:
        """The pending syncs until just before their ``n``-th fsync; whether the cut came (the
        machine must then ``crash``: its broker is gone)."""
        self.fs.cut_at_fsync(n)
        try:
            self.net.complete_syncs()
        except PowerCut:
            return True
        finally:
            self.fs.disarm()
        return False

    def crash(self, mode: str = "drop", media: str | None = None, rng: random.Random | None = None) -> None:
        """Power loss (``mode``: drop, torn, scramble), then optionally a media fault (``bit-flip``,
        ``truncation``) before the machine boots again. Raises StoreError if the store refuses the
        disk (a detected corruption)."""
        rng = rng or random.Random(f"{self.seed}/crash/{self.boots}")
        self.fs.power_loss(rng, mode)
        if media == "bit-flip":
            self.fs.bit_flip(rng)
        elif media == "truncation":
            self.fs.truncate(rng)
        self.net = self._boot()

    def restart(self) -> bool:
        """A clean stop: connections closed by the broker, everything synced, the store closed.
        Returns whether the store closed cleanly (False: its last sync failed, e.g. a full disk)."""
        self.broker.shutdown(self.now)
        self.run()
        for client in list(self.net.clients.values()):
            client.drop()
        self.run()
        self.net.complete_syncs()
        before = len(_capture.records)
        try:
            self.broker.close_store()
        except (StoreError, OSError) as exc:
            _capture.records.append(f"closing the store: {exc}")
        clean = len(_capture.records) == before
        self.reports.extend(_capture.records[before:])
        del _capture.records[before:]
        self.net = self._boot()
        return clean

    def _fold_log(self) -> None:
        """Every action the broker emitted goes into the trace digest (byte for byte)."""
        log = self.net.log
        for entry in log[self._logged:]:
            self._digest.update(repr(entry).encode())
        self._logged = len(log)

    def journal_mark(self) -> tuple[int, int]:
        """Changes whenever the store's journal was fsynced or rewritten (acks in it are durable)."""
        return self.fs.sync_mark(f"{DATA_DIR}/journal")

    def digest(self) -> str:
        return self._digest.hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"boots": self.boots, "faults": list(self.fs.faults)}
