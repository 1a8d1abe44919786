"""SegmentStore's one-fsync path: an enqueue is written beside its message in the segment, so the
segment's fsync alone makes a receipted message durable; the journal's copy of it, removals and
delivery counts ride along with a later journal fsync. Recovery takes the enqueues the journal lacks
from the segments (never one the journal already holds or removed), and a zeroed tail ends a file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from storagetest_helpers import kill, msg

import engine.storage.segment.store as seg_mod
from engine.records import _REC
from engine.segment_store import SegmentStore
from engine.storage.segment._records import _ENQ
from engine.store import QueueDef

ENQ_RECORD = _REC.size + _ENQ.size


def queue_ids(store: SegmentStore, name: str = "q") -> list[int]:
    return [sm.message.id for sm in store.recover().messages.get(("/", name), [])]


def journal_size(path: Path) -> int:
    return (path / "journal").stat().st_size


class PowerLossStore(SegmentStore):
    """Remembers how far each file was fsynced; ``power_loss`` cuts every file there (the bytes only
    written to the OS are lost, as after a power cut) and leaves the directory to be reopened."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.durable: dict[str, int] = {}
        self.fsynced: list[str] = []  # "journal" or "segment", one per data fsync
        super().__init__(*args, **kw)

    def _fsync(self, fd: int) -> None:
        super()._fsync(fd)
        files = [*self._segs.values(), *([self._j] if self._j is not None else [])]
        f = next(f for f in files if f.fd == fd)
        self.durable[f.path] = f.written
        self.fsynced.append("journal" if f is self._j else "segment")

    def _fsync_full(self, fd: int) -> None:  # the rewritten journal: durable as a whole
        super()._fsync_full(fd)
        if os.path.isfile(f"/proc/self/fd/{fd}"):
            path = os.readlink(f"/proc/self/fd/{fd}")
            self.durable[path.removesuffix(".tmp")] = os.fstat(fd).st_size

    def power_loss(self) -> None:
        paths = [f.path for f in self._segs.values()] + ([self._j.path] if self._j is not None else [])
        kill(self)
        for path in paths:
            with open(path, "r+b") as f:
                f.truncate(self.durable.get(path, 0))


def test_a_synced_enqueue_needs_only_its_segment(tmp_path: Path) -> None:
    s = PowerLossStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    s.enqueue("/", "q", msg(1))  # (an idle queue's first message journals its queue id: synced)
    s.sync(1)
    s.fsynced.clear()
    for i in range(2, 5):
        s.enqueue("/", "q", msg(i))
        s.sync(i)
    assert s.fsynced == ["segment"] * 3  # one fdatasync per receipted message
    s.power_loss()  # the journal's enqueues of 2-4 were never fsynced
    s = SegmentStore(tmp_path)
    assert queue_ids(s) == [1, 2, 3, 4]
    kill(s)  # recovery wrote them into the journal: a second restart finds them again
    assert queue_ids(SegmentStore(tmp_path)) == [1, 2, 3, 4]


def test_definitions_and_ack_only_syncs_fsync_the_journal(tmp_path: Path) -> None:
    s = PowerLossStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    s.enqueue("/", "q", msg(1))
    s.sync(1)
    assert sorted(s.fsynced) == ["journal", "segment"]  # the queue's definition must not wait
    s.fsynced.clear()
    s.enqueue("/", "q", msg(2))
    s.remove("/", "q", 1)
    s.sync(2)
    assert s.fsynced == ["segment"]  # the removal rides along
    s.remove("/", "q", 2)
    s.sync(3)  # nothing in the segments to sync: the journal's removals are
    assert s.fsynced == ["segment", "journal"]
    s.power_loss()
    assert queue_ids(SegmentStore(tmp_path)) == []


def test_a_removal_the_journal_lost_is_a_redelivery_never_a_loss(tmp_path: Path) -> None:
    s = PowerLossStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in (1, 2):
        s.enqueue("/", "q", msg(i))
    s.sync(1)
    s.remove("/", "q", 1)
    s.enqueue("/", "q", msg(3))
    s.sync(2)  # 3 is durable with the segment; the removal of 1 only written to the OS
    s.power_loss()
    assert queue_ids(SegmentStore(tmp_path)) == [1, 2, 3]


def test_lazy_journal_syncs_are_bounded(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(seg_mod, "JOURNAL_LAZY_SYNCS", 3)
    s = PowerLossStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    s.fsynced.clear()
    for i in range(1, 9):
        s.enqueue("/", "q", msg(i))
        s.sync(i)
    assert s.fsynced.count("segment") == 8
    assert s.fsynced.count("journal") == 2  # every 4th sync carries the journal along
    s.fsynced.clear()
    s.enqueue("/", "q", msg(9))
    s.remove("/", "q", 1)
    s.close()
    assert sorted(s.fsynced) == ["journal", "segment"]  # closing leaves nothing unsynced


def test_a_shared_record_is_enqueued_once_per_queue(tmp_path: Path) -> None:
    """One record routed to two queues (two markers at one position): with the journal whole, the
    queue that removed it stays empty; with the journal cut after the first queue's enqueue, the
    second queue's enqueue is taken from its marker (and the first is not applied twice)."""
    for cut in (False, True):
        path = tmp_path / str(cut)
        s = SegmentStore(path)
        s.add_queue(QueueDef("/", "q"))
        s.add_queue(QueueDef("/", "r"))
        for name in ("q", "r"):  # their first messages give them queue ids
            s.enqueue("/", name, msg(1))
            s.remove("/", name, 1)
        s.sync(0)
        base = journal_size(path)
        m = msg(2)
        s.enqueue("/", "q", m)
        s.enqueue("/", "r", m)  # the same record, a second marker
        if not cut:
            s.remove("/", "q", 2)
        s.sync(1)
        kill(s)
        if cut:
            journal = path / "journal"
            journal.write_bytes(journal.read_bytes()[: base + ENQ_RECORD])
        s = SegmentStore(path)
        messages = s.recover().messages
        got = [[sm.message.id for sm in messages.get(("/", name), [])] for name in ("q", "r")]
        assert got == ([[2], [2]] if cut else [[], [2]])
        s.close()


def test_messages_removed_before_a_compaction_stay_removed(tmp_path: Path) -> None:
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 6):
        s.enqueue("/", "q", msg(i))
    for i in (1, 2, 4):
        s.remove("/", "q", i)
    with s._lock:
        s._compact()  # the journal: live enqueues only, then the mark past every marker so far
    s.enqueue("/", "q", msg(6))
    s.sync(1)
    kill(s)
    s = SegmentStore(tmp_path)
    assert queue_ids(s) == [3, 5, 6]
    s.close()
    assert queue_ids(SegmentStore(tmp_path)) == [3, 5, 6]


def test_a_zeroed_tail_ends_the_records(tmp_path: Path) -> None:
    """A segment or journal followed by zeros (preallocated, or pages written back past the end)
    loads as if the zeros were not there; a torn record before the zeros is dropped as any torn tail."""
    s = SegmentStore(tmp_path)
    s.add_queue(QueueDef("/", "q"))
    for i in (1, 2):
        s.enqueue("/", "q", msg(i))
    s.sync(1)
    seg = s._seg
    assert seg is not None
    s.enqueue("/", "q", msg(3))
    kill(s)
    with open(seg.path, "ab") as f:  # message 3 torn halfway, then a zeroed tail
        f.write(b"\x2a\x00\x00\x00\x11\x22")
        f.write(bytes(64 << 10))
    with open(tmp_path / "journal", "ab") as f:
        f.write(bytes(4096))
    s = SegmentStore(tmp_path)
    assert queue_ids(s) == [1, 2]
    assert s.dropped_on_recovery == 0


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from("eerc"), st.integers(0, 20), st.integers(1, 5), st.booleans()),
                    max_size=30))
def test_power_loss_loses_no_synced_message(tmp_path_factory: Any, ops: list[tuple[str, int, int, bool]]) -> None:
    """Random enqueues, removals, recounts, some followed by a sync, then a power cut: every message
    enqueued before a sync and not removed is back; nothing comes back that was never enqueued; a
    removal synced by a journal fsync stays removed."""
    path = tmp_path_factory.mktemp("power")
    s = PowerLossStore(path, segment_size=2048)
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    live: dict[int, bool] = {}  # id -> durable (a sync followed its enqueue)
    gone: set[int] = set()  # removed, and a journal fsync followed
    removed: set[int] = set()
    next_id = 0
    for op, k, count, sync in ops:
        if op == "e":
            next_id += 1
            s.enqueue("/", "q", msg(next_id, b"b" * 300))
            live[next_id] = False
        elif op == "r" and live:
            mid = sorted(live)[k % len(live)]
            s.remove("/", "q", mid)
            del live[mid]
            removed.add(mid)
        elif op == "c" and live:
            s.update_delivery("/", "q", sorted(live)[k % len(live)], count)
        if sync:
            s.fsynced.clear()
            s.sync(1)
            live = dict.fromkeys(live, True)
            if "journal" in s.fsynced:
                gone |= removed
    s.power_loss()
    got = set(queue_ids(SegmentStore(path)))
    assert {mid for mid, durable in live.items() if durable} <= got
    assert got <= set(live) | removed
    assert not got & gone


def test_segments_are_zeroed_ahead_and_reload_exactly(tmp_path: Path) -> None:
    """The sync writes zeros ahead of the current segment's data (so its appends need no size
    update); recovery reads the records up to the zeros, and every message is back."""
    s = SegmentStore(tmp_path, segment_size=256 << 10)
    s.add_queue(QueueDef("/", "q"))
    for i in range(1, 301):
        s.enqueue("/", "q", msg(i, b"z" * 1000))
        if i % 10 == 0:
            s.sync(i)
    seg = s._seg
    assert seg is not None
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "segments").iterdir()}
    assert len(sizes) == 2 and os.path.getsize(seg.path) == 256 << 10 > seg.written
    assert all(size <= 256 << 10 for size in sizes.values())
    assert bytes(os.pread(seg.fd, 64, seg.written)) == bytes(64)  # zeros past the data
    kill(s)
    s = SegmentStore(tmp_path, segment_size=256 << 10)
    assert queue_ids(s) == list(range(1, 301))
    assert s.dropped_on_recovery == 0
