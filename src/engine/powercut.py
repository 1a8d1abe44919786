"""A real-disk power cut for the crash test: ``PowerCutFS`` records, ``power_cut`` cuts.

``PowerCutFS`` is the real file system (``OsFileSystem``) with an undo log beside it: before each
write (``pwrite``, ``ftruncate``, an ``O_TRUNC`` open) it appends the bytes about to be overwritten
and the file's old size to the log, and after each fsync/fdatasync it appends "this inode is synced
up to record N" (N taken when the sync *started*: a write racing with the sync counts as unsynced,
which a real disk may also do). The log needs no fsync of its own: it only has to survive a
``kill -9``, which keeps the page cache; it is written before the data it protects, so a kill
between the two leaves an undo record for a write that never happened, which undoes nothing.

After the kill, ``power_cut(log, root)`` makes the directory what a power cut would have left: for
every file, the writes after its last sync are undone (newest first), and with ``rng`` given the
write-back is torn instead: per file, the unsynced writes before a random one survive, that one
survives up to a random byte (a cut inside one of its pages), the rest are undone.

What it cannot model: directory entries are durable at once (creations, renames, unlinks: a file
made and never synced comes back empty, as ext4 leaves it, never missing; an unsynced unlink never
comes back), the kernel writing pages back out of order inside one write, and a lying drive.
Selected only by the crash test, through ``SANSMQ_POWER_CUT_LOG`` in the environment of the server it starts.
"""

from __future__ import annotations

import os
import random
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .fs import OsFileSystem, write_by_descriptor

__all__ = ["POWER_CUT_LOG", "PowerCutFS", "CutReport", "power_cut"]

#: environment variable naming the undo log; when set, ``sansmq serve`` runs its store on PowerCutFS
POWER_CUT_LOG = "SANSMQ_POWER_CUT_LOG"

# one record: kind, seq, inode, offset, old size, length written, length of the old bytes that follow
_REC = struct.Struct("<cQQqqQQ")
_UNDO, _SYNC, _GONE = b"U", b"S", b"G"


class PowerCutFS(OsFileSystem):
    """``OsFileSystem`` that logs what a power cut would undo (module docstring)."""

    def __init__(self, log_path: str) -> None:
        self._log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # one lock orders each undo record with its write, and a sync's mark with both
        self._mutex = threading.Lock()
        self._seq = 0
        self._ino: dict[int, int] = {}  # fd -> inode of the regular files open (unlinked ones dropped)

    def _record(self, kind: bytes, ino: int, offset: int = 0, old_size: int = 0, written: int = 0,
                old: bytes = b"") -> None:
        self._seq += 1
        os.write(self._log, _REC.pack(kind, self._seq, ino, offset, old_size, written, len(old)) + old)

    def _save(self, fd: int, offset: int, written: int, end: int) -> None:
        """Log the bytes of [offset, end) and the size before they change, for a write of
        ``written`` bytes at ``offset`` (0: a truncation) (caller holds the lock)."""
        ino = self._ino.get(fd)
        if ino is None:  # a directory or a file already unlinked: nothing to restore
            return
        size = os.fstat(fd).st_size
        old = os.pread(fd, min(end, size) - offset, offset) if offset < size else b""
        self._record(_UNDO, ino, offset, size, written, old)

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:  # type: ignore[override]
        with self._mutex:
            trunc = flags & os.O_TRUNC
            if flags & os.O_ACCMODE == os.O_WRONLY:  # the old bytes are read before each write
                flags = flags & ~os.O_ACCMODE | os.O_RDWR
            fd = os.open(path, flags & ~os.O_TRUNC, mode)
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                self._ino[fd] = st.st_ino
                if trunc:
                    self._save(fd, 0, 0, st.st_size)
                    os.ftruncate(fd, 0)
            return fd

    def close(self, fd: int) -> None:  # type: ignore[override]
        with self._mutex:
            self._ino.pop(fd, None)
        os.close(fd)

    def dup(self, fd: int) -> int:  # type: ignore[override]
        with self._mutex:
            new = os.dup(fd)
            if fd in self._ino:
                self._ino[new] = self._ino[fd]
            return new

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:  # type: ignore[override]
        with self._mutex:
            self._save(fd, offset, len(data), offset + len(data))
            return os.pwrite(fd, data, offset)

    def ftruncate(self, fd: int, length: int) -> None:  # type: ignore[override]
        with self._mutex:
            self._save(fd, length, 0, os.fstat(fd).st_size)
            os.ftruncate(fd, length)

    def _synced(self, fd: int, sync: Callable[[int], None]) -> None:
        with self._mutex:
            ino, upto = self._ino.get(fd), self._seq
        sync(fd)  # outside the lock: writes go on meanwhile
        if ino is not None:
            with self._mutex:
                self._record(_SYNC, ino, upto)

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        self._synced(fd, os.fsync)

    def fdatasync(self, fd: int) -> None:  # type: ignore[override]
        self._synced(fd, os.fdatasync)

    def _gone(self, path: str) -> None:
        """``path``'s inode leaves the name space (caller holds the lock): its undo records go."""
        try:
            ino = os.stat(path).st_ino
        except FileNotFoundError:
            return
        self._record(_GONE, ino)
        for fd in [fd for fd, i in self._ino.items() if i == ino]:
            del self._ino[fd]  # later writes to it cannot matter (and the number may be reused)

    def unlink(self, path: str) -> None:  # type: ignore[override]
        with self._mutex:
            self._gone(path)
            os.unlink(path)

    def replace(self, src: str, dst: str) -> None:  # type: ignore[override]
        with self._mutex:
            self._gone(dst)
            os.replace(src, dst)

    def rmtree(self, path: str) -> None:  # type: ignore[override]
        with self._mutex:
            for top, _dirs, files in os.walk(path):
                for name in files:
                    self._gone(os.path.join(top, name))
        super().rmtree(path)

    def write_file(self, path: str, data: bytes) -> None:  # type: ignore[override]
        write_by_descriptor(self, path, data)


@dataclass
class CutReport:
    files: int = 0  # files with unsynced writes
    undone: int = 0  # writes undone
    torn: int = 0  # writes kept in part


#: an unsynced write: (offset, old size, bytes written (0: a truncation), the bytes it overwrote)
Write = tuple[int, int, int, bytes]


def _read_log(log_path: str) -> dict[int, list[Write]]:
    """Per inode, the writes after its last sync, oldest first."""
    with open(log_path, "rb") as f:
        raw = f.read()
    pending: dict[int, list[tuple[int, Write]]] = {}
    at = 0
    while at + _REC.size <= len(raw):
        kind, seq, ino, offset, old_size, written, n = _REC.unpack_from(raw, at)
        if at + _REC.size + n > len(raw):
            break  # the kill came in the middle of this record: its write never happened
        old = raw[at + _REC.size:at + _REC.size + n]
        at += _REC.size + n
        if kind == _UNDO:
            pending.setdefault(ino, []).append((seq, (offset, old_size, written, old)))
        elif kind == _SYNC:  # ``offset`` holds the last record the sync covers
            if ino in pending:
                pending[ino] = [r for r in pending[ino] if r[0] > offset]
        elif kind == _GONE:
            pending.pop(ino, None)
    return {ino: [w for _, w in recs] for ino, recs in pending.items() if recs}


def _undo(fd: int, write: Write, start: int | None = None) -> None:
    """Give the bytes from ``start`` (default: all) of ``write`` their old content and size back."""
    offset, old_size, _written, old = write
    cut = offset if start is None else start
    if cut < offset + len(old):
        os.pwrite(fd, old[cut - offset:], cut)
    os.ftruncate(fd, max(old_size, cut) if start is not None else old_size)


def power_cut(log_path: str, root: str, rng: random.Random | None = None) -> CutReport:
    """Undo in ``root`` what ``log_path`` says was not synced (torn when ``rng`` is given); the
    log is removed, so the next run starts a fresh one."""
    pending = _read_log(log_path)
    paths = {}
    for top, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(top, name)
            paths[os.lstat(p).st_ino] = p
    report = CutReport()
    for ino in sorted(pending):
        path = paths.get(ino)
        if path is None:  # unlinked after the write (unlinks are durable here)
            continue
        writes = pending[ino]
        report.files += 1
        # torn: the write-back went in order and stopped inside write ``torn``
        torn = rng.randrange(len(writes)) if rng is not None else None
        fd = os.open(path, os.O_RDWR)
        try:
            for write in reversed(writes[(torn + 1 if torn is not None else 0):]):
                _undo(fd, write)
                report.undone += 1
            if torn is not None and writes[torn][2]:
                offset, _old_size, written, _old = writes[torn]
                _undo(fd, writes[torn], rng.randrange(offset, offset + written))  # type: ignore[union-attr]
                report.torn += 1
        finally:
            os.close(fd)
    os.unlink(log_path)
    return report
