"""The stream logs of a data directory: one directory of segment files per stream (``_files``),
named by a hash of (vhost, name), and the set of logs a sync must visit."""

from __future__ import annotations

import hashlib
import os
import threading

from ..fs import OS_FS, FileSystem
from ._files import FileStreamLog
from ._log import StreamSettings

__all__ = ["FileStreams", "stream_key"]


def stream_key(vhost: str, name: str) -> str:
    raw = vhost.encode("utf-8", "surrogateescape") + b"\0" + name.encode("utf-8", "surrogateescape")
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


class FileStreams:
    """The stream logs of a data directory (``<root>/streams``), by (vhost, name)."""

    def __init__(self, root: str, *, fsync: bool = True, fs: FileSystem = OS_FS) -> None:
        self.root = os.path.join(root, "streams")
        self.fsync = fsync
        self._fs = fs
        self.logs: dict[tuple[str, str], FileStreamLog] = {}
        #: logs changed since the last sync (a sync visits only these, not every stream)
        self._changed: dict[FileStreamLog, None] = {}
        self._changed_lock = threading.Lock()

    def open(self, vhost: str, name: str, settings: StreamSettings | None) -> FileStreamLog:
        slog = self.logs.get((vhost, name))
        if slog is not None:
            if settings is not None:
                slog.settings = settings
            return slog
        path = os.path.join(self.root, stream_key(vhost, name))
        if not self._fs.isdir(path):
            self._fs.makedirs(path)
            self._fs.write_file(os.path.join(path, "NAME"), vhost.encode("utf-8", "surrogateescape") + b"\0"
                                + name.encode("utf-8", "surrogateescape"))
            if self.fsync:
                self._fs.fsync_dir(self.root)
        slog = self.logs[(vhost, name)] = FileStreamLog(path, settings, fsync=self.fsync, on_change=self._note,
                                                        fs=self._fs)
        # recovery deleted or truncated files, or scanned a sealed segment without a saved index:
        # the next sync makes that durable, or saves it
        if slog._dir_dirty or any(not s.sidecar for s in slog._segs[:-1]):
            with slog._lock:
                slog._changes()
        return slog

    def _note(self, slog: FileStreamLog) -> None:
        with self._changed_lock:
            self._changed[slog] = None

    def delete(self, vhost: str, name: str) -> None:
        slog = self.logs.pop((vhost, name), None)
        if slog is not None:
            with self._changed_lock:
                self._changed.pop(slog, None)
            with slog._lock:
                for seg in slog._segs:
                    self._fs.close(seg.fd)
                slog._segs = []
                slog._dir_dirty = False  # a sync already under way finds nothing left to do
        path = os.path.join(self.root, stream_key(vhost, name))
        if self._fs.isdir(path):
            self._fs.rmtree(path)

    def sync(self) -> None:
        """Sync the logs changed since the last sync (worker thread)."""
        with self._changed_lock:
            changed, self._changed = list(self._changed), {}
        for i, slog in enumerate(changed):
            try:
                slog.sync()
            except BaseException:
                with self._changed_lock:  # retried by the next sync
                    self._changed.update(dict.fromkeys(changed[i:]))
                raise

    def close(self) -> None:
        for slog in self.logs.values():
            slog.close()
        self.logs.clear()
