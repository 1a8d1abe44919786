"""The file-system seam under the segment store and the stream log.

Both stores make every file call through one ``FileSystem`` object: ``OS_FS`` (the real one, whose
methods *are* the ``os`` functions, so the hot path costs one attribute lookup as before) or
``engine.simfs.SimFS`` (in memory, seeded, with injectable fsync failures, disk full, power loss,
torn pages, bit flips and truncation) under the simulator. Descriptors are ints in both.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

__all__ = ["FileSystem", "OsFileSystem", "OS_FS", "write_by_descriptor"]


class FileSystem(Protocol):
    """What the segment store and the stream log need of a file system (``os`` names and meanings)."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int: ...
    def close(self, fd: int) -> None: ...
    def dup(self, fd: int) -> int: ...
    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int: ...
    def pread(self, fd: int, n: int, offset: int) -> bytes: ...
    def fsync(self, fd: int) -> None: ...
    def fdatasync(self, fd: int) -> None: ...
    def ftruncate(self, fd: int, length: int) -> None: ...
    def fsize(self, fd: int) -> int: ...
    def replace(self, src: str, dst: str) -> None: ...
    def unlink(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def makedirs(self, path: str, mode: int = 0o777, exist_ok: bool = False) -> None: ...
    def isdir(self, path: str) -> bool: ...
    def getsize(self, path: str) -> int: ...
    def rmtree(self, path: str) -> None: ...
    def read_file(self, path: str) -> bytes: ...
    def write_file(self, path: str, data: bytes) -> None: ...
    def mapped(self, fd: int) -> AbstractContextManager[bytes | mmap.mmap]: ...
    def fsync_dir(self, path: str) -> None: ...
    def lock(self, path: str) -> int: ...


class OsFileSystem:
    """The real file system: ``os`` calls, as the stores made them directly before the seam."""

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    dup = staticmethod(os.dup)
    pwrite = staticmethod(os.pwrite)
    pread = staticmethod(os.pread)
    fsync = staticmethod(os.fsync)
    fdatasync = staticmethod(os.fdatasync)
    ftruncate = staticmethod(os.ftruncate)
    replace = staticmethod(os.replace)
    unlink = staticmethod(os.unlink)
    listdir = staticmethod(os.listdir)
    makedirs = staticmethod(os.makedirs)
    isdir = staticmethod(os.path.isdir)
    getsize = staticmethod(os.path.getsize)

    @staticmethod
    def fsize(fd: int) -> int:
        return os.fstat(fd).st_size

    @staticmethod
    def rmtree(path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    @staticmethod
    def read_file(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    @staticmethod
    def write_file(path: str, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)

    @staticmethod
    @contextmanager
    def mapped(fd: int) -> Iterator[bytes | mmap.mmap]:
        """The whole file, mapped rather than read (a big journal costs no heap); b"" when empty."""
        if not os.fstat(fd).st_size:
            yield b""
            return
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            yield data

    @staticmethod
    def fsync_dir(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def lock(path: str) -> int:
        """An exclusive, non-blocking flock on ``path`` (created); OSError when another holds it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return fd


OS_FS: FileSystem = OsFileSystem()


def write_by_descriptor(fs: FileSystem, path: str, data: bytes) -> None:
    """``write_file`` made of ``fs``'s own open, pwrite and close (for file systems that watch those)."""
    fd = fs.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        fs.pwrite(fd, data, 0)
    finally:
        fs.close(fd)
