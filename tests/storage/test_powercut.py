"""engine.powercut: the real-disk power cut of scripts/crash_test.py --power-cut.

After the cut every file holds exactly what its last fsync covered; with a rng the write-back is
torn (a prefix of the unsynced writes kept, one of them in part)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from engine.powercut import PowerCutFS, power_cut


def _fs(tmp_path: Path) -> tuple[PowerCutFS, str, str]:
    root = tmp_path / "data"
    root.mkdir(parents=True)
    return PowerCutFS(str(tmp_path / "cut.log")), str(root), str(tmp_path / "cut.log")


def test_writes_after_the_last_sync_are_gone_synced_ones_stay(tmp_path: Path) -> None:
    fs, root, log = _fs(tmp_path)
    a, b, new = os.path.join(root, "a"), os.path.join(root, "b"), os.path.join(root, "new")
    fa = fs.open(a, os.O_RDWR | os.O_CREAT)
    fs.pwrite(fa, b"synced-1", 0)
    fs.fdatasync(fa)
    fs.pwrite(fa, b"XX", 0)  # an overwrite of synced bytes: the old ones come back
    fs.pwrite(fa, b"-lost-append", 8)
    fb = fs.open(b, os.O_RDWR | os.O_CREAT)
    fs.pwrite(fb, b"all synced", 0)
    fs.fsync(fb)
    fn = fs.open(new, os.O_RDWR | os.O_CREAT)
    fs.pwrite(fn, b"never synced", 0)
    Path(root, "idx").write_bytes(b"the old index")
    fs.write_file(os.path.join(root, "tmp"), b"renamed, never synced")
    fs.replace(os.path.join(root, "tmp"), os.path.join(root, "idx"))
    fs.ftruncate(fb, 3)  # an unsynced truncation: the cut bytes come back
    for fd in (fa, fb, fn):
        fs.close(fd)
    assert Path(a).read_bytes() == b"XXnced-1-lost-append"  # what a kill -9 leaves
    report = power_cut(log, root)
    assert Path(a).read_bytes() == b"synced-1"
    assert Path(b).read_bytes() == b"all synced"
    assert Path(new).read_bytes() == b""  # the name was durable, its data not (ext4's empty file)
    assert Path(root, "idx").read_bytes() == b""  # the rename was durable (the old index is gone)
    fs = PowerCutFS(log)  # the next run (the server starts again), a fresh log
    wo = fs.open(os.path.join(root, "wo"), os.O_WRONLY | os.O_CREAT)  # write-only: still undoable
    fs.pwrite(wo, b"kept", 0)
    fs.fsync(wo)
    fs.close(wo)
    wo = fs.open(os.path.join(root, "wo"), os.O_WRONLY | os.O_TRUNC)
    fs.pwrite(wo, b"lost", 0)
    fs.close(wo)
    power_cut(log, root)
    assert Path(root, "wo").read_bytes() == b"kept"
    assert (report.files, report.undone, report.torn) == (4, 6, 0)
    assert not os.path.exists(log)  # the next run starts a fresh log


def test_a_sync_covers_only_writes_made_before_it_and_unlinked_files_are_left_alone(tmp_path: Path) -> None:
    fs, root, log = _fs(tmp_path)
    path = os.path.join(root, "f")
    fd = fs.open(path, os.O_RDWR | os.O_CREAT)
    fs.pwrite(fd, b"one", 0)
    fs.fsync(fd)
    fs.pwrite(fd, b"two", 3)
    dup = fs.dup(fd)
    fs.fdatasync(dup)  # one inode: a sync through a dup covers the writes through the original
    fs.pwrite(fd, b"three", 6)
    gone = os.path.join(root, "gone")
    fg = fs.open(gone, os.O_RDWR | os.O_CREAT)
    fs.pwrite(fg, b"x", 0)
    fs.close(fg)
    fs.unlink(gone)
    power_cut(log, root)
    assert Path(path).read_bytes() == b"onetwo"


def test_a_torn_cut_keeps_a_prefix_of_the_unsynced_writes(tmp_path: Path) -> None:
    outcomes = set()
    for seed in range(40):
        fs, root, log = _fs(tmp_path / str(seed))
        path = os.path.join(root, "f")
        fd = fs.open(path, os.O_RDWR | os.O_CREAT)
        fs.pwrite(fd, b"S" * 10, 0)
        fs.fsync(fd)
        fs.pwrite(fd, b"a" * 5000, 10)
        fs.pwrite(fd, b"b" * 5000, 5010)
        fs.close(fd)
        report = power_cut(log, root, random.Random(seed))
        data = Path(path).read_bytes()
        assert report.torn == 1
        assert data.startswith(b"S" * 10) and (b"S" * 10 + b"a" * 5000 + b"b" * 5000).startswith(data)
        assert len(data) < 10010 + 5000  # the torn write lost at least its last byte
        outcomes.add(len(data) > 5010)
    assert outcomes == {True, False}  # the cut fell in either write

