"""The file-system seam: SimFS's semantics (sync, power loss, fsyncgate, ENOSPC, media faults) and
the segment store and the stream log running on it."""

from __future__ import annotations

import errno
import os
import random

import pytest
from storagetest_helpers import msg

from engine.fs import OS_FS
from engine.segment_store import SegmentStore
from engine.simfs import PAGE, SimFS
from engine.store import QueueDef, StoreError
from engine.streams._files import FileStreamLog

RW = os.O_RDWR | os.O_CREAT


def synced_file(fs: SimFS, path: str, data: bytes) -> int:
    fd = fs.open(path, RW)
    fs.pwrite(fd, data, 0)
    fs.fsync(fd)
    fs.fsync_dir(os.path.dirname(path))
    return fd


def test_power_loss_drops_unsynced_bytes_and_unsynced_names() -> None:
    fs = SimFS()
    fs.makedirs("/d")
    fd = synced_file(fs, "/d/a", b"durable")
    fs.pwrite(fd, b"-lost", 7)
    other = fs.open("/d/b", RW)  # its name was never made durable
    fs.pwrite(other, b"x", 0)
    fs.fsync(other)
    assert fs.read_file("/d/a") == b"durable-lost"  # readers see the page cache
    fs.power_loss(random.Random(0), "drop")
    assert fs.listdir("/d") == ["a"]
    assert fs.read_file("/d/a") == b"durable"
    with pytest.raises(OSError):
        fs.pread(fd, 1, 0)  # descriptors died with the machine


def test_torn_power_loss_keeps_a_prefix_of_the_unsynced_bytes() -> None:
    kept = set()
    for seed in range(40):
        fs = SimFS()
        fd = synced_file(fs, "/a", b"")
        new = bytes(range(256)) * (3 * PAGE // 256)
        fs.pwrite(fd, new, 0)
        fs.power_loss(random.Random(seed), "torn")
        got = fs.read_file("/a")
        assert new.startswith(got)
        kept.add(len(got))
    assert len(kept) > 10 and min(kept) < PAGE  # cuts anywhere, inside pages too


def test_failed_fsync_marks_pages_clean_and_they_never_reach_the_disk() -> None:
    fs = SimFS()
    fd = synced_file(fs, "/a", b"")
    fs.pwrite(fd, b"A" * 10, 0)
    fs.fail_fsyncs(1)
    with pytest.raises(OSError) as err:
        fs.fdatasync(fd)
    assert err.value.errno == errno.EIO
    fs.fdatasync(fd)  # "succeeds", as Linux's does after EIO, without writing the pages
    fs.pwrite(fd, b"B", PAGE + 5)  # another page, written after the failure, does reach the disk
    fs.fsync(fd)
    fs.power_loss(random.Random(0), "drop")
    data = fs.read_file("/a")
    assert data[:10] == bytes(10) and data[PAGE + 5:PAGE + 6] == b"B"


def test_disk_full_refuses_growth_but_not_overwrites() -> None:
    fs = SimFS()
    fd = synced_file(fs, "/a", b"0123")
    fs.disk_full = True
    fs.pwrite(fd, b"ab", 1)
    with pytest.raises(OSError) as err:
        fs.pwrite(fd, b"xyz", 3)
    assert err.value.errno == errno.ENOSPC
    assert fs.read_file("/a") == b"0ab3"


def test_bit_flips_and_truncation_only_between_crash_and_restart() -> None:
    fs = SimFS()
    fd = synced_file(fs, "/a", b"\0" * 64)
    with pytest.raises(RuntimeError):
        fs.bit_flip(random.Random(0))
    fs.close(fd)
    assert fs.bit_flip(random.Random(0)) == "/a"
    assert sum(bin(b).count("1") for b in fs.read_file("/a")) == 1
    fs.truncate(random.Random(1))
    assert len(fs.read_file("/a")) < 64
    assert [k for k, _ in fs.faults] == ["bit-flip", "truncation"]


def test_the_real_file_system_is_the_os_calls() -> None:
    assert OS_FS.pwrite is os.pwrite and OS_FS.fdatasync is os.fdatasync and OS_FS.pread is os.pread


def test_segment_store_on_simfs_keeps_what_was_synced_through_a_power_loss() -> None:
    for mode in ("drop", "torn", "scramble"):
        fs = SimFS()
        s = SegmentStore("/data", fs=fs, segment_size=4096)
        s.recover()
        s.add_queue(QueueDef("/", "q"))
        for i in range(1, 40):
            s.enqueue("/", "q", msg(i))
        s.sync(1)
        for i in range(40, 60):
            s.enqueue("/", "q", msg(i))  # never synced
        s._write_all()  # handed to the OS, not fsynced
        fs.power_loss(random.Random(7), mode)
        again = SegmentStore("/data", fs=fs, segment_size=4096)
        ids = [sm.message.id for sm in again.recover().messages[("/", "q")]]
        assert ids[:39] == list(range(1, 40)), mode
        assert ids == list(range(1, len(ids) + 1))  # a prefix of the unsynced ones, in order
        assert not fs.listdir("/data/segments") == []


def test_segment_store_on_simfs_reports_a_failed_fsync_and_enospc() -> None:
    fs = SimFS()
    s = SegmentStore("/data", fs=fs)
    s.recover()
    s.add_queue(QueueDef("/", "q"))
    s.enqueue("/", "q", msg(1))
    fs.fail_fsyncs(1)
    with pytest.raises(StoreError, match="cannot sync"):
        s.sync(1)
    s.sync(2)
    fs.disk_full = True
    s.enqueue("/", "q", msg(2))
    with pytest.raises(StoreError, match="ENOSPC"):
        s.sync(3)
    with pytest.raises(StoreError, match="ENOSPC"):
        s.enqueue("/", "q", msg(3))  # refused while writes fail
    fs.disk_full = False
    s.enqueue("/", "q", msg(3))
    s.sync(4)
    s.close()
    again = SegmentStore("/data", fs=fs)
    assert [sm.message.id for sm in again.recover().messages[("/", "q")]] == [1, 2, 3]


def test_stream_log_on_simfs_detects_a_bit_flip_and_never_returns_it() -> None:
    fs = SimFS()
    log = FileStreamLog("/s", fs=fs)
    for i in range(20):
        log.append(msg(i), 1_700_000_000.0 + i)
    log.sync()
    log.close()
    fd = fs.open("/s/00000000000000000000.seg", os.O_RDWR)
    size = fs.fsize(fd)
    fs.pwrite(fd, bytes([fs.pread(fd, 1, size - 3)[0] ^ 0x10]), size - 3)  # in the last record's body
    fs.close(fd)
    again = FileStreamLog("/s", fs=fs)
    assert again.dropped_on_recovery == 1
    got = again.read(0, max_count=100)
    assert [r.offset for r in got] == list(range(19))
    assert all(r.message.body == b"body-%d" % r.offset for r in got)


def test_a_retried_fsync_after_a_failed_one_writes_the_pages_again_segment_store() -> None:
    """fsyncgate (found by the simulator, seed 27): after EIO Linux marks the pages clean; the retry's
    fsync "succeeds" without writing them, so a confirmed message was lost at the next power cut."""
    fs = SimFS()
    s = SegmentStore("/data", fs=fs)
    s.recover()
    s.add_queue(QueueDef("/", "q"))
    s.sync(1)
    s.enqueue("/", "q", msg(1, b"1" * 2 * PAGE))  # its first page is written by no later write
    fs.fail_fsyncs(1)
    with pytest.raises(StoreError, match="cannot sync"):
        s.sync(2)
    s.enqueue("/", "q", msg(2))
    s.sync(3)  # reported durable: message 1 with it
    fs.power_loss(random.Random(0), "drop")
    again = SegmentStore("/data", fs=fs)
    assert [sm.message.id for sm in again.recover().messages[("/", "q")]] == [1, 2]
    assert again.dropped_on_recovery == 0


def test_a_retried_fsync_after_a_failed_one_writes_the_pages_again_stream_log() -> None:
    fs = SimFS()
    log = FileStreamLog("/s", fs=fs)
    log.append(msg(0), 1_700_000_000.0)
    log.sync()
    log.append(msg(1, b"1" * 2 * PAGE), 1_700_000_001.0)
    fs.fail_fsyncs(1)
    with pytest.raises(StoreError, match="cannot sync"):
        log.sync()
    log.append(msg(2), 1_700_000_002.0)
    log.sync()
    assert log.committed == 3
    fs.power_loss(random.Random(0), "drop")
    again = FileStreamLog("/s", fs=fs)
    assert [r.message.body for r in again.read(0)] == [b"body-0", b"1" * 2 * PAGE, b"body-2"]


def test_a_power_cut_in_the_middle_of_a_sync() -> None:
    """The power goes before a sync's n-th fsync: the sync never reports, what an earlier sync
    reported stays; the first message of an idle queue needs its journal fsync (its queue id is
    only there), so a cut after the segment's fdatasync may lose it, never report it."""
    from engine.simfs import PowerCut

    for cut, survivors in ((0, [[1]]), (1, [[1], [1, 2]])):
        fs = SimFS()
        s = SegmentStore("/data", fs=fs)
        s.recover()
        s.add_queue(QueueDef("/", "q"))
        s.enqueue("/", "q", msg(1))
        s.sync(1)
        s.enqueue("/", "q", msg(2))
        s.add_queue(QueueDef("/", "other"))  # a definition: this sync must fsync the journal too
        fs.cut_at_fsync(cut)
        with pytest.raises(PowerCut):
            s.sync(2)
        assert fs.counts["cut-in-sync"] == 1
        fs.power_loss(random.Random(0), "drop")
        again = SegmentStore("/data", fs=fs)
        assert [sm.message.id for sm in again.recover().messages[("/", "q")]] in survivors


def test_a_segment_number_the_journal_covers_is_never_reused_after_its_file_was_lost() -> None:
    """Found by the simulator (seed 3765): the journal reached the disk covering positions in a new
    segment whose directory entry did not; the next start reused that segment's number, so the
    markers of messages confirmed after it lay below the journal's coverage and were never replayed."""
    fs = SimFS()
    s = SegmentStore("/data", fs=fs, segment_size=16384)
    s.recover()
    s.add_queue(QueueDef("/", "q"))
    s.enqueue("/", "q", msg(1, b"1" * 15000))
    s.sync(1)
    s.enqueue("/", "q", msg(2, b"2" * 5000))  # rotates: segment 2, its name not durable yet
    s.enqueue("/", "q", msg(3))  # the journal covers segment 2 up to here
    s.remove("/", "q", 2)
    s.remove("/", "q", 3)
    s._write_all()
    fs.fsync(s._j.fd)  # the kernel happened to write the journal back, not the directory
    fs.power_loss(random.Random(0), "drop")
    s = SegmentStore("/data", fs=fs, segment_size=16384)
    assert [sm.message.id for sm in s.recover().messages[("/", "q")]] == [1]
    s.enqueue("/", "q", msg(4))
    s.sync(2)  # reported durable
    fs.power_loss(random.Random(0), "drop")
    again = SegmentStore("/data", fs=fs, segment_size=16384)
    assert [sm.message.id for sm in again.recover().messages[("/", "q")]] == [1, 4]


def test_a_message_recovered_from_its_segment_marker_keeps_its_queue_ttl() -> None:
    """Found by the simulator (seed 6843): a TTL queue's expiry of a message was only in the
    journal; when the segment reached the disk and the journal's tail did not, the message came back
    from its enqueue marker without an expiry and was delivered long after its TTL."""
    fs = SimFS()
    s = SegmentStore("/data", fs=fs)
    s.recover()
    s.add_queue(QueueDef("/", "t", args={"x-message-ttl": 1000}))
    s.sync(1)
    s.enqueue_expiring("/", "t", msg(1), 1_700_000_001.0)
    s._write_all()
    fs.fsync(s._seg.fd)  # the kernel happened to write the segment back, not the journal
    fs.power_loss(random.Random(0), "drop")
    again = SegmentStore("/data", fs=fs)
    (stored,) = again.recover().messages[("/", "t")]
    assert stored.message.id == 1 and stored.expires == 1_700_000_001.0


def test_a_queue_id_lost_with_a_damaged_journal_tail_is_never_reused() -> None:
    """Found by the simulator (seed 3027, bit flips): the journal's tail with a queue's id was lost;
    the next queue to need an id got the same one, and at a later recovery the old queue's enqueue
    markers moved its messages into the other queue."""
    fs = SimFS()
    s = SegmentStore("/data", fs=fs)
    s.recover()
    s.add_queue(QueueDef("/", "a"))
    s.add_queue(QueueDef("/", "b"))
    s.sync(1)
    intact = fs.getsize("/data/journal")
    s.enqueue("/", "a", msg(1))  # a's first message: a gets an id (journalled) and a marker
    lost_qid = s._qget("/", "a").qid
    s.sync(2)
    s.close()
    fd = fs.open("/data/journal", os.O_RDWR)
    fs.ftruncate(fd, intact)  # the damaged tail dropped: a's id and its enqueue are gone
    fs.fsync(fd)
    fs.close(fd)
    s = SegmentStore("/data", fs=fs)  # sees the lost id in a's marker, rewrites the journal
    s.recover()
    s.close()
    s = SegmentStore("/data", fs=fs)  # the marker is before the journal's coverage now
    s.recover()
    s.enqueue("/", "b", msg(2))
    assert s._qget("/", "b").qid != lost_qid
