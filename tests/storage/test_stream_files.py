"""The segment-file stream log (engine.streams._files): on-disk recovery (torn tails at any byte,
garbage, segments after a torn one), sync racing appends and rollover (a crash image keeps
everything a sync reported), write failures, large records, and the index's memory cost."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamtest_helpers import smsg

from engine._message import Message
from engine.store import StoreError
from engine.streams import StreamSettings
from engine.streams._files import FileStreamLog
from engine.streams._segment import INDEX_STRIDE

T0 = 1_700_000_000.0


def segment_files(path: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".seg"))


def check_contents(log: FileStreamLog) -> None:
    """Every offset from first to tail is there, in order, with the message appended at it."""
    got = log.read(0, max_count=10**9, max_bytes=10**12)
    assert [r.offset for r in got] == list(range(log.first, log.tail))
    assert all(r.message.id == r.offset and r.message.body == b"m%d" % r.offset for r in got)


def build(path: str, n: int, segment_bytes: int = 600) -> FileStreamLog:
    log = FileStreamLog(path, StreamSettings(segment_bytes=segment_bytes))
    for i in range(n):
        log.append(smsg(i), T0 + i, producer="p", publishing_id=i)
        if i % 7 == 3:
            log.store_offset("c", i, T0 + i)
        if i % 5 == 4:
            log.sync()
    log.close()
    return log


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), cut=st.floats(0, 1), which=st.floats(0, 1))
def test_recovery_after_truncation_at_any_byte_keeps_a_valid_prefix(n: int, cut: float, which: float) -> None:
    with tempfile.TemporaryDirectory() as d:
        build(d, n)
        files = segment_files(d)
        victim = files[min(len(files) - 1, int(which * len(files)))]
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:
            f.truncate(int(cut * size))
        log = FileStreamLog(d)
        assert log.tail <= n
        check_contents(log)
        if log.tail:
            assert log.last_publishing_id("p") == log.tail - 1  # dedup state matches what survived
        c = log.stored_offset("c")
        assert c is None or c < n
        assert log.append(smsg(log.tail), T0 + 100) == log.tail - 1
        log.sync()
        log.close()
        again = FileStreamLog(d)
        check_contents(again)
        again.close()


def test_garbage_after_the_last_record_is_dropped_and_counted(tmp_path) -> None:
    build(str(tmp_path), 20)
    last = segment_files(str(tmp_path))[-1]
    with open(last, "ab") as f:
        f.write(os.urandom(100))
    log = FileStreamLog(str(tmp_path))
    assert log.tail == 20 and log.dropped_on_recovery == 1
    check_contents(log)
    log.close()
    assert FileStreamLog(str(tmp_path)).dropped_on_recovery == 0  # the tail was cut off


def test_segments_after_a_torn_one_are_deleted(tmp_path) -> None:
    build(str(tmp_path), 40)
    files = segment_files(str(tmp_path))
    assert len(files) >= 4
    with open(files[1], "r+b") as f:
        f.truncate(os.path.getsize(files[1]) - 3)
    log = FileStreamLog(str(tmp_path))
    assert segment_files(str(tmp_path)) == files[:2]
    assert log.dropped_on_recovery > 1
    check_contents(log)


def test_a_corrupt_byte_in_the_middle_ends_the_valid_data(tmp_path) -> None:
    build(str(tmp_path), 10, segment_bytes=1 << 20)
    (only,) = segment_files(str(tmp_path))
    with open(only, "r+b") as f:
        f.seek(os.path.getsize(only) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    log = FileStreamLog(str(tmp_path))
    assert 0 < log.tail < 10
    check_contents(log)


def test_sealed_segments_are_opened_from_their_saved_index(tmp_path, monkeypatch) -> None:
    d = str(tmp_path)
    build(d, 60)
    segs = segment_files(d)
    idx = sorted(n for n in os.listdir(d) if n.endswith(".idx"))
    assert len(segs) > 3 and len(idx) == len(segs) - 1  # every sealed one, not the active one
    scans: list[str] = []
    real_scan = FileStreamLog._scan
    monkeypatch.setattr(FileStreamLog, "_scan", lambda self, seg, state, chunks=None: scans.append(seg.path) or real_scan(self, seg, state, chunks))
    log = FileStreamLog(d)
    assert scans == [segs[-1]]  # only the newest segment is read
    check_contents(log)
    assert (log.stored_offset("c"), log.last_publishing_id("p")) == (59 - (59 - 3) % 7, 59)
    log.close()
    with open(os.path.join(d, idx[1]), "r+b") as f:  # a damaged sidecar: that segment is scanned
        f.seek(30)
        f.write(b"\xff\xff")
    open(os.path.join(d, "junk.idx.tmp"), "wb").close()
    scans.clear()
    log = FileStreamLog(d)
    assert scans == [segs[1], segs[-1]]
    assert not os.path.exists(os.path.join(d, "junk.idx.tmp"))
    check_contents(log)
    assert log.offset_at(int((T0 + 30) * 1000)) == 30
    log.close()


def test_the_newest_segment_keeps_its_state_when_the_one_after_it_is_dropped(tmp_path) -> None:
    d = str(tmp_path)
    build(d, 60)
    segs = segment_files(d)
    with open(segs[-1], "r+b") as f:
        f.truncate(len(b"SMQSTRM1") + 5)  # its snapshot torn: nothing valid in it
    log = FileStreamLog(d)
    assert segment_files(d) == segs[:-1]
    assert not os.path.exists(segs[-2][:-4] + ".idx")  # appended to again: no stale sidecar
    assert log.last_publishing_id("p") == log.tail - 1 and log.stored_offset("c") is not None
    assert log.append(smsg(log.tail), T0) == log.tail - 1
    log.close()
    check_contents(FileStreamLog(d))


class RecordingLog(FileStreamLog):
    """Remembers, per segment file, the size it had when it was last fsynced."""

    def __init__(self, *args, **kw) -> None:
        self.fsynced: dict[str, int] = {}
        super().__init__(*args, **kw)

    def _fsync(self, fd: int) -> None:
        super()._fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".seg"):
            self.fsynced[os.path.basename(path)] = os.fstat(fd).st_size


def test_sync_racing_appends_and_rollover_covers_everything_it_reports(tmp_path) -> None:
    path = str(tmp_path / "s")
    log = RecordingLog(path, StreamSettings(segment_bytes=2048))
    reported: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def syncer() -> None:
        try:
            while not stop.is_set():
                log.sync()
                reported.append(log.committed)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    t = threading.Thread(target=syncer)
    t.start()
    try:
        for i in range(3000):
            log.append(smsg(i), T0 + i / 1000)
            if i % 100 == 0:
                log.store_offset("c", i, T0)
    finally:
        stop.set()
        t.join()
    assert not errors
    assert reported == sorted(reported) and reported and reported[-1] <= 3000
    assert len(segment_files(path)) > 20  # many rollovers happened under the syncs
    best = reported[-1]
    # the crash image: every segment file cut to what its last fsync covered
    image = str(tmp_path / "image")
    shutil.copytree(path, image)
    for name in os.listdir(image):
        if name.endswith(".seg"):
            with open(os.path.join(image, name), "r+b") as f:
                f.truncate(log.fsynced.get(name, 0))
    crashed = FileStreamLog(image)
    assert crashed.tail >= best
    check_contents(crashed)
    log.close()


class FailingLog(FileStreamLog):
    fail = False

    def _pwrite(self, fd: int, data: bytearray, offset: int) -> int:
        if self.fail:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super()._pwrite(fd, data, offset)


def test_a_failed_write_refuses_appends_until_a_retry_works_and_loses_nothing(tmp_path) -> None:
    log = FailingLog(str(tmp_path), StreamSettings())
    log.append(smsg(0), T0)
    log.fail = True
    with pytest.raises(StoreError, match="ENOSPC"):
        log.sync()
    assert log.committed == 0
    with pytest.raises(StoreError):
        log.append(smsg(1), T0)
    assert log.tail == 1
    log.fail = False
    assert log.append(smsg(1), T0) == 1
    log.sync()
    assert log.committed == 2
    log.close()
    check_contents(FileStreamLog(str(tmp_path)))


def test_records_larger_than_a_read_block_and_sequential_batches(tmp_path) -> None:
    log = FileStreamLog(str(tmp_path), StreamSettings(segment_bytes=1 << 20))
    big = b"B" * (300 << 10)
    for i in range(5):
        log.append(Message(i, "", "k", {}, big if i % 2 else b"m%d" % i, persistent=True), T0)
    assert [len(r.message.body) for r in log.read(0, max_bytes=1 << 30)] == [2, 300 << 10, 2, 300 << 10, 2]
    log.sync()  # now from the file instead of the buffer
    got, at = [], 0
    while at < log.tail:  # one record per batch: every read after the first starts at a hint
        batch = log.read(at, max_bytes=1)
        got += batch
        at = batch[-1].offset + 1
    assert [r.offset for r in got] == [0, 1, 2, 3, 4] and got[3].message.body == big
    log.store_offset("c", 4, T0)  # a record that is no message, between two reads at the tail
    log.append(smsg(5), T0)
    assert log._seek(log._segs[-1], 5) > log._segs[-1].idx_pos[-1]  # resumes where the last read ended
    assert [(r.offset, r.message.body) for r in log.read(5)] == [(5, b"m5")]


@pytest.mark.slow
def test_a_million_message_stream_index_costs_little_memory(tmp_path) -> None:
    n = 1_000_000
    path = str(tmp_path / "s")
    log = FileStreamLog(path, StreamSettings(segment_bytes=8 << 20), fsync=False)
    m = Message(0, "", "k", {}, b"x" * 20, persistent=True)
    for i in range(n):
        log.append(m, T0 + i / 1000)
        if i % 50_000 == 0:
            log.sync()
    log.close()
    tracemalloc.start()
    try:
        reopened = FileStreamLog(path, StreamSettings(segment_bytes=8 << 20))
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reopened.tail == n and reopened.segment_count > 5
    entries = sum(len(s.idx_off) for s in reopened._segs)
    assert entries <= n // INDEX_STRIDE + 2 * reopened.segment_count
    print(f"1M-message stream: {held} bytes held by the log after opening (peak {peak})")
    assert held < 1_500_000  # ~24 bytes per 64 messages, plus the segment objects
    assert [r.offset for r in reopened.read(654_321, max_count=3)] == [654_321, 654_322, 654_323]
    reopened.close()


class CountingLog(FileStreamLog):
    syncs = 0
    fail = False

    def sync(self) -> None:
        type(self).syncs += 1
        if self.fail:
            raise StoreError("injected")
        super().sync()


def test_a_sync_visits_only_the_streams_changed_since_the_last_one(tmp_path, monkeypatch) -> None:
    from engine.streams import _directory

    monkeypatch.setattr(_directory, "FileStreamLog", CountingLog)
    streams = _directory.FileStreams(str(tmp_path))
    logs = [streams.open("/", f"s{i}", None) for i in range(50)]
    logs[3].append(smsg(0), T0)
    logs[7].store_offset("c", 0, T0)
    CountingLog.syncs = 0
    streams.sync()
    assert CountingLog.syncs == 2 and logs[3].committed == 1
    streams.sync()
    assert CountingLog.syncs == 2  # nothing changed: nothing visited
    logs[3].append(smsg(1), T0)
    logs[3].fail = True
    with pytest.raises(StoreError):
        streams.sync()
    logs[3].fail = False
    streams.sync()  # a failed log is retried by the next sync
    assert logs[3].committed == 2
    logs[9].append(smsg(0), T0)
    streams.delete("/", "s9")  # a deleted log's pending change is dropped, not synced
    CountingLog.syncs = 0
    streams.sync()
    assert CountingLog.syncs == 0
    streams.close()
    reopened = _directory.FileStreams(str(tmp_path))
    assert reopened.open("/", "s3", None).tail == 2
    assert reopened.open("/", "s7", None).stored_offset("c") == 0
    reopened.close()


def test_a_sealed_segment_opened_without_its_saved_index_gets_it_at_the_next_sync(tmp_path) -> None:
    from engine.streams._directory import FileStreams

    streams = FileStreams(str(tmp_path))
    log = streams.open("/", "s", StreamSettings(segment_bytes=600))
    for i in range(60):
        log.append(smsg(i), T0)
    streams.sync()
    streams.close()
    idx = sorted(os.path.join(log.path, n) for n in os.listdir(log.path) if n.endswith(".idx"))
    assert len(idx) >= 3
    os.unlink(idx[1])
    streams = FileStreams(str(tmp_path))
    reopened = streams.open("/", "s", None)
    streams.sync()  # nothing appended, but the index the open had to rebuild by a scan is saved
    assert os.path.exists(idx[1])
    check_contents(reopened)
    streams.close()
