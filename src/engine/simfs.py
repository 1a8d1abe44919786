"""``SimFS``: an in-memory, deterministic file system with the faults a real disk has.

Each file keeps what a reader sees (``data``: the page cache) and what a power cut leaves
(``durable``); ``fsync``/``fdatasync`` copy one to the other. A directory's entries (creations,
renames, unlinks) become durable only when the directory is fsynced (POSIX: a new file's fsync
does not make its name durable). Directories themselves are durable once made (a simplification:
the stores make their directories once, before any data).

Faults (all driven by the ``random.Random`` passed in, so a seed replays them):

- ``fail_fsyncs(n)``: the next ``n`` fsync/fdatasync calls fail with EIO *and*, as Linux does
  ("fsyncgate"), the pages they should have written are marked clean: a later fsync does not write
  them again unless they are rewritten, so their data survives a power cut only by luck (never here).
- ``disk_full``: a write that would grow a file fails with ENOSPC (overwrites within it succeed).
- ``power_loss(rng, mode)``: every descriptor is gone and every file is what its disk holds:
  ``"drop"`` loses everything written since the last sync, ``"torn"`` keeps the unsynced bytes up
  to a random cut (in-order write-back, the cut inside a page), ``"scramble"`` keeps, drops or tears
  each unsynced 4 KiB page independently (write-back in any order).
- ``bit_flip(rng)`` / ``truncate(rng)``: one random bit of one random file flipped / one file cut
  short (media corruption, a lost tail); only while no descriptor is open (between a crash and the
  restart), and reported in ``faults``.

What it cannot model: the kernel's own bugs, misdirected writes, a drive that lies about flushes
without a power cut, latency. Reads always see the page cache, as on a live system.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

from .fs import write_by_descriptor

__all__ = ["SimFS", "PAGE", "PowerCut"]

PAGE = 4096


class _Inode:
    __slots__ = ("data", "durable", "lost", "serial", "fsyncs")

    def __init__(self, serial: int = 0) -> None:
        self.serial = serial  # which file this is (names move with rename)
        self.fsyncs = 0  # successful fsyncs
        self.data = bytearray()
        self.durable = bytearray()
        #: pages a failed fsync marked clean: a later fsync keeps their old durable content
        self.lost: set[int] = set()


class PowerCut(BaseException):
    """Raised by the fsync ``cut_at_fsync`` chose: the power goes in the middle of a sync (a
    BaseException, so no ``except OSError`` in the store handles it; the machine is gone)."""


def _err(code: int, path: str = "") -> OSError:
    return OSError(code, os.strerror(code), path)


class SimFS:
    """The file system of one simulated machine (see the module docstring)."""

    def __init__(self) -> None:
        self._files: dict[str, _Inode] = {}
        self._dirs: set[str] = {"/"}
        #: directory -> {name: inode} as of its last fsync (what a power cut leaves)
        self._durable_dirs: dict[str, dict[str, _Inode]] = {}
        self._fds: dict[int, _Inode] = {}
        self._dir_fds: dict[int, str] = {}  # serial of a directory descriptor's inode -> its path
        self._next_fd = 3
        self._serial = 0
        self._fail_fsyncs = 0
        self._cut_in: int | None = None  # fsync calls left before the power cut (None: no cut armed)
        self.disk_full = False
        #: every injected fault, as (kind, detail) in order: the trace shows them
        self.faults: list[tuple[str, str]] = []
        #: counters by fault kind
        self.counts: dict[str, int] = {}

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _norm(path: str) -> str:
        return os.path.normpath(os.path.join("/", os.fspath(path)))

    def _inode(self, fd: int) -> _Inode:
        try:
            return self._fds[fd]
        except KeyError:
            raise _err(errno.EBADF) from None

    def _note(self, kind: str, detail: str) -> None:
        self.faults.append((kind, detail))
        self.counts[kind] = self.counts.get(kind, 0) + 1

    # -- descriptors -----------------------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        path = self._norm(path)
        if path in self._dirs:
            self._serial += 1
            ino = _Inode(self._serial)  # a directory descriptor: its fsync is fsync_dir's
            self._dir_fds[ino.serial] = path
        else:
            ino_or_none = self._files.get(path)
            if ino_or_none is None:
                if not flags & os.O_CREAT:
                    raise _err(errno.ENOENT, path)
                if os.path.dirname(path) not in self._dirs:
                    raise _err(errno.ENOENT, path)
                self._serial += 1
                ino_or_none = self._files[path] = _Inode(self._serial)
            ino = ino_or_none
            if flags & os.O_TRUNC:
                ino.data.clear()
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = ino
        return fd

    def close(self, fd: int) -> None:
        ino = self._fds.pop(fd, None)
        if ino is None:
            raise _err(errno.EBADF)
        if ino.serial in self._dir_fds and ino not in self._fds.values():
            del self._dir_fds[ino.serial]

    def dup(self, fd: int) -> int:
        ino = self._inode(fd)
        new = self._next_fd
        self._next_fd += 1
        self._fds[new] = ino
        return new

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        ino = self._inode(fd)
        n = len(data)
        end = offset + n
        if end > len(ino.data):
            if self.disk_full:
                self._note("enospc", f"write of {n} at {offset}")
                raise _err(errno.ENOSPC)
            ino.data.extend(bytes(end - len(ino.data)))
        ino.data[offset:end] = data
        if ino.lost:  # rewritten pages will be written back again
            ino.lost.difference_update(range(offset // PAGE, (end - 1) // PAGE + 1))
        return n

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        return bytes(self._inode(fd).data[offset:offset + n])

    def fsync(self, fd: int) -> None:
        ino = self._inode(fd)
        self._maybe_cut()
        if ino.serial in self._dir_fds:
            self.fsync_dir(self._dir_fds[ino.serial])
            return
        if self._fail_fsyncs:
            self._fail_fsyncs -= 1
            self._note("fsync-failure", f"fd {fd}")
            # fsyncgate: the dirty pages are marked clean, their data never written back
            ino.lost.update(_dirty_pages(ino))
            raise _err(errno.EIO)
        ino.fsyncs += 1
        if ino.lost:
            keep = bytearray(ino.data)
            for page in ino.lost:
                at = page * PAGE
                keep[at:at + PAGE] = ino.durable[at:at + PAGE].ljust(min(PAGE, len(keep) - at), b"\0")
            ino.durable = keep
        else:
            ino.durable = bytearray(ino.data)

    fdatasync = fsync

    def ftruncate(self, fd: int, length: int) -> None:
        ino = self._inode(fd)
        if length <= len(ino.data):
            del ino.data[length:]
        else:
            ino.data.extend(bytes(length - len(ino.data)))

    def fsize(self, fd: int) -> int:
        return len(self._inode(fd).data)

    # -- names -----------------------------------------------------------------------------------
    def replace(self, src: str, dst: str) -> None:
        src, dst = self._norm(src), self._norm(dst)
        ino = self._files.pop(src, None)
        if ino is None:
            raise _err(errno.ENOENT, src)
        self._files[dst] = ino

    def unlink(self, path: str) -> None:
        if self._files.pop(self._norm(path), None) is None:
            raise _err(errno.ENOENT, path)

    def listdir(self, path: str) -> list[str]:
        path = self._norm(path)
        if path not in self._dirs:
            raise _err(errno.ENOENT, path)
        names = [os.path.basename(p) for p in (*self._files, *self._dirs) if p != path and os.path.dirname(p) == path]
        return sorted(names)

    def makedirs(self, path: str, mode: int = 0o777, exist_ok: bool = False) -> None:
        path = self._norm(path)
        if path in self._dirs:
            if not exist_ok:
                raise _err(errno.EEXIST, path)
            return
        while path not in self._dirs:
            self._dirs.add(path)
            path = os.path.dirname(path)

    def isdir(self, path: str) -> bool:
        return self._norm(path) in self._dirs

    def getsize(self, path: str) -> int:
        ino = self._files.get(self._norm(path))
        if ino is None:
            raise _err(errno.ENOENT, path)
        return len(ino.data)

    def rmtree(self, path: str) -> None:
        """Removes the tree at once, durably (a simplification: deleting a stream is rare)."""
        path = self._norm(path)
        prefix = path + "/"
        for p in [p for p in self._files if p.startswith(prefix)]:
            del self._files[p]
        self._dirs = {d for d in self._dirs if d != path and not d.startswith(prefix)}
        self._durable_dirs = {d: e for d, e in self._durable_dirs.items() if d != path and not d.startswith(prefix)}

    def read_file(self, path: str) -> bytes:
        ino = self._files.get(self._norm(path))
        if ino is None:
            raise FileNotFoundError(errno.ENOENT, "No such file", path)
        return bytes(ino.data)

    def write_file(self, path: str, data: bytes) -> None:
        write_by_descriptor(self, path, data)

    @contextmanager
    def mapped(self, fd: int) -> Iterator[bytes]:
        yield bytes(self._inode(fd).data)

    def fsync_dir(self, path: str) -> None:
        path = self._norm(path)
        if path not in self._dirs:
            raise _err(errno.ENOENT, path)
        self._maybe_cut()
        if self._fail_fsyncs:
            self._fail_fsyncs -= 1
            self._note("fsync-failure", f"dir {path}")
            raise _err(errno.EIO)
        self._durable_dirs[path] = {os.path.basename(p): ino for p, ino in self._files.items()
                                    if os.path.dirname(p) == path}

    def lock(self, path: str) -> int:
        return self.open(path, os.O_RDWR | os.O_CREAT)

    # -- faults ----------------------------------------------------------------------------------
    def fail_fsyncs(self, n: int = 1) -> None:
        self._fail_fsyncs += n

    def disarm(self) -> None:
        """Forget fsync failures and power cuts armed but not hit."""
        self._fail_fsyncs = 0
        self._cut_in = None

    def cut_at_fsync(self, n: int) -> None:
        """The power goes just before the ``n``-th fsync from now (0: the next): PowerCut is raised."""
        self._cut_in = n

    def _maybe_cut(self) -> None:
        if self._cut_in is None:
            return
        if self._cut_in == 0:
            self._cut_in = None
            self._note("cut-in-sync", "before an fsync")
            raise PowerCut()
        self._cut_in -= 1

    def power_loss(self, rng: random.Random, mode: str = "drop") -> None:
        """The machine loses power: descriptors gone, each file what its disk holds (module doc)."""
        self._fds.clear()
        self._dir_fds.clear()
        self.disarm()
        files: dict[str, _Inode] = {}
        for d in sorted(self._durable_dirs):
            for name, ino in self._durable_dirs[d].items():
                files[os.path.join(d, name)] = ino
        kept = 0
        for ino in {id(i): i for i in files.values()}.values():
            kept += _write_back(ino, rng, mode)
            ino.data = bytearray(ino.durable)
            ino.lost.clear()
        self._files = files
        self._note("power-loss", f"{mode}, {kept} unsynced bytes kept")

    def _victim(self, rng: random.Random) -> tuple[str, _Inode] | None:
        if self._fds:
            raise RuntimeError("media faults are injected while nothing is open (between crash and restart)")
        victims = sorted(p for p, ino in self._files.items() if ino.data)
        if not victims:
            return None
        path = rng.choice(victims)
        return path, self._files[path]

    def bit_flip(self, rng: random.Random) -> str | None:
        if (victim := self._victim(rng)) is None:
            return None
        path, ino = victim
        at = rng.randrange(len(ino.data))
        bit = rng.randrange(8)
        ino.data[at] ^= 1 << bit
        ino.durable = bytearray(ino.data)
        self._note("bit-flip", f"{path} byte {at} bit {bit}")
        return path

    def truncate(self, rng: random.Random) -> str | None:
        if (victim := self._victim(rng)) is None:
            return None
        path, ino = victim
        n = rng.randrange(len(ino.data))
        del ino.data[n:]
        ino.durable = bytearray(ino.data)
        self._note("truncation", f"{path} to {n} bytes")
        return path

    def sync_mark(self, path: str) -> tuple[int, int]:
        """(which file, how many fsyncs) at ``path``: it changes when the file there was fsynced
        or replaced by another (for "has this file been made durable since")."""
        ino = self._files.get(self._norm(path))
        return (ino.serial, ino.fsyncs) if ino is not None else (0, 0)

    def snapshot(self) -> dict[str, bytes]:
        """Every file's visible content (for traces and tests)."""
        return {p: bytes(i.data) for p, i in sorted(self._files.items())}


def _dirty_pages(ino: _Inode) -> list[int]:
    data, durable = ino.data, ino.durable
    n = max(len(data), len(durable))
    return [p for p in range((n + PAGE - 1) // PAGE)
            if data[p * PAGE:(p + 1) * PAGE] != durable[p * PAGE:(p + 1) * PAGE]]


def _write_back(ino: _Inode, rng: random.Random, mode: str) -> int:
    """Settle ``ino.durable`` as a power cut leaves it; returns how many unsynced bytes survived."""
    dirty = [p for p in _dirty_pages(ino) if p not in ino.lost]
    if mode == "drop" or not dirty:
        return 0
    data, disk = ino.data, ino.durable
    kept = 0

    def put(page: int, upto: int) -> None:
        nonlocal kept
        at = page * PAGE
        new = data[at:min(at + upto, len(data))]
        if len(disk) < at + len(new):
            disk.extend(bytes(at + len(new) - len(disk)))
        disk[at:at + len(new)] = new
        kept += len(new)

    if mode == "torn":  # in order, up to a random cut
        cut = rng.randrange(len(dirty) + 1)
        for page in dirty[:cut]:
            put(page, PAGE)
        if cut < len(dirty):
            put(dirty[cut], rng.randrange(PAGE))
    else:  # scramble: each page independently
        for page in dirty:
            r = rng.random()
            if r < 0.4:
                put(page, PAGE)
            elif r < 0.6:
                put(page, rng.randrange(PAGE))
    return kept
